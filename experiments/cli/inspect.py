"""CLI commands that read runs: `report`, `show`, `runs`, `view`, `compare`, `export`, `audit`.

`register(app)` adds them to the medpanel app; `write_html_report(run_dir)` is what `medpanel report
RUN_DIR --html` calls.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table as RichTable
from rich.text import Text

from medpanel.experiments.cli.output import console, print_table, print_transcript, refuse_without_transcripts
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.outputs import check_output_file, check_output_folder, write_output
from medpanel.experiments.run.store.ownership import check_run_paths
from medpanel.experiments.run.store.rundir import (
    load_record,
    load_run,
    load_transcript,
    open_store,
    progress_note,
    read_status,
    transcript_path,
    transcript_paths,
)
from medpanel.experiments.run.store.runlock import lock_holder
from medpanel.inputs import one_line

if TYPE_CHECKING:
    from medpanel.agents.tables import Table
    from medpanel.experiments.analysis.digest import RowDigest
    from medpanel.experiments.analysis.report import RunTables
    from medpanel.experiments.run.store.records import RunRecord
    from medpanel.experiments.run.store.rows import Row

# Each command imports what it alone runs (the analysis and its statistics, the viewer and its
# templates, the exports, the audit's detectors) in its own body: the commands of this module share
# one entry in `cli/lazy.py`, and `show` or `runs` should not pay for `report --html`'s imports.

DEFAULT_PORT = 8765


def write_html_report(run_dir: Path, *, provenance: Path | None = None, messages: str = "last",
                      shared: RunTables | None = None) -> list[Path]:
    """Build report/index.html, report/questions/*.html, report/plots/*.{png,svg}, report/leakage.json."""
    from medpanel.experiments.view.viewer import build_site

    # load_run checks the directory
    return build_site(Path(run_dir), provenance=provenance, messages=messages, shared=shared)


def _print_tables(tables: list[Table], where: str) -> None:
    for t in tables:
        print_table(t, where=where)


def _echo(text: str) -> None:
    console.print(text, markup=False, highlight=False)


def _missing_transcripts(run_dir: Path) -> tuple[dict[str, list[int]], int]:
    """Per condition, [transcripts missing, rows]; and the run's row count."""
    data = load_run(run_dir)
    path_of = transcript_paths(run_dir)  # the run's folder resolved once; a row out of it refused
    missing: dict[str, list[int]] = {}
    for row in data.rows:
        counts = missing.setdefault(row.condition, [0, 0])
        counts[1] += 1
        counts[0] += not path_of(row).is_file()
    return missing, len(data.rows)


def _warn_missing_transcripts(run_dir: Path, what: str, digests: Sequence[RowDigest] | None = None) -> None:
    """Say which conditions' transcripts are missing (deleted, or a copy made without them); from
    the digests of the rows when the report read them (each knows whether its file was there)."""
    missing: dict[str, list[int]] = {}
    if digests is not None:
        for d in digests:
            counts = missing.setdefault(d.row.condition, [0, 0])
            counts[0] += d.missing
            counts[1] += 1
    else:
        missing = _missing_transcripts(run_dir)[0]
    for condition, (gone, total) in missing.items():
        if gone:
            sys.stderr.write(f"warning: condition {condition}: {gone} of {total} transcripts are missing from "
                             f"{run_dir / 'transcripts'}; {what}\n")


def _note_progress(run_dir: Path) -> None:
    """Say on stderr when a reader shows a run that is still running or stopped short."""
    note = progress_note(run_dir)
    if note:
        sys.stderr.write(f"note: {note}\n")
        sys.stderr.flush()


def view(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: any free port).")] = DEFAULT_PORT,
    rebuild: Annotated[bool, typer.Option(help="Rebuild the HTML report before serving.")] = False,
    poll_s: Annotated[float, typer.Option("--poll-s", min=0.2, max=600.0,
                                          help="How often the live page of a running run asks for news.")] = 2.0,
) -> None:
    """Serve the run's HTML report read-only on 127.0.0.1 (builds it first if missing). On a run that
    is still running, a live page updates as pairs finish and turns into the report when it stops."""
    from medpanel.experiments.view.live import LiveSite
    from medpanel.experiments.view.viewer import make_server

    record = load_record(run_dir)  # a damaged run is refused even when an old report is there to serve
    report = run_dir / "report"
    check_run_paths(run_dir)
    site = LiveSite(run_dir, record, lambda: write_html_report(run_dir), poll_ms=round(poll_s * 1000))
    live = site.live.running()
    if not live and (rebuild or not (report / "index.html").is_file()):
        paths = write_html_report(run_dir)
        _echo(f"HTML report written: {len(paths)} files in {report}/")
    try:
        server = make_server(report, port, live=site if live else None)
    except OSError as exc:
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be opened ({exc.strerror or exc})"
        raise UserError(f"port {port} {why}. Choose another with --port N (or --port 0 for any free port)",
                        field="--port") from None
    host, bound = server.server_address[:2]
    name = host.decode() if isinstance(host, bytes) else str(host)
    _note_progress(run_dir)
    what = "the live view of" if live else "read-only"
    _echo(f"Serving {what} {report} at http://{name}:{bound}/index.html  (Ctrl-C to stop)")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        site.close()


def compare(
    run_dirs: Annotated[list[Path], typer.Argument(help="Two or more run directories.")],
    pair: Annotated[list[str] | None, typer.Option(
        "--pair", help="A pair to compare as 'RUN/COND,RUN/COND' (repeatable); default: the same condition "
                       "in the first run against each other run.")] = None,
    condition: Annotated[list[str] | None, typer.Option(
        "--condition", help="Only these condition slugs (repeatable).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Also write each table as CSV, and compare.md, into this directory.")] = None,
) -> None:
    """Align questions by (dataset, qid) across runs and print accuracy, cost and paired tables."""
    from medpanel.experiments.analysis.compare import align, compare_tables
    from medpanel.experiments.analysis.report import write_tables

    if out is not None:
        _check_out_dir(out)  # before the (slow) alignment and bootstrap
    pairs = None
    if pair:
        pairs = []
        for p in pair:
            parts = [x.strip() for x in p.split(",")]
            if len(parts) != 2 or not all(parts):
                raise UserError(f"{p!r} is not a pair. Write it as RUN/COND,RUN/COND", field="--pair")
            pairs.append((parts[0], parts[1]))
    cmp = align(run_dirs, pairs=pairs, conditions=condition or None)
    tables = compare_tables(cmp)
    _print_tables(tables, f"the CSV files and compare.md in {out}" if out is not None else
                  "the CSV files and compare.md that --out DIR writes")
    if out is not None:
        _check_out_dir(out)

        written = write_tables(out, tables, title=f"Compare: {', '.join(cmp.labels)}", md_name="compare.md")
        _echo(f"Tables written to {out} ({len(written)} files)")


def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl, csv, or inspect (Inspect AI eval logs).")] = "jsonl",
    out: Annotated[Path | None, typer.Option(
        "--out", help="Output file ('-' for stdout); default report/results.<format>. For inspect: a folder, "
                      "default report/inspect/.")] = None,
) -> None:
    """One record per (condition, question, repeat) with every row, summary and question field; or
    (--format inspect) one Inspect AI eval log per condition and repeat, for `inspect view`."""
    from medpanel.experiments.analysis.export import FORMATS, write_export
    from medpanel.experiments.analysis.inspect_export import write_inspect_logs

    if fmt == "inspect":
        load_record(run_dir)
        if out is None:
            folder = Confined(run_dir).folder("report/inspect")  # inside the run, never through a link
        else:
            folder = check_output_folder(out, field="--out")
        paths = write_inspect_logs(run_dir, folder)
        _echo(f"{len(paths)} Inspect logs written to {folder}/ (inspect view --log-dir {folder})")
        _note_progress(run_dir)
        return
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}. Use --format jsonl, csv or inspect", field="--format")

    load_record(run_dir)
    if out is not None and str(out) == "-":
        write_export(run_dir, fmt, sys.stdout)
        _note_progress(run_dir)
        return
    target = None if out is None else check_output_file(out, field="--out", run_dir=run_dir)
    # Rendered before the file is opened, so a damaged run leaves no empty output behind.
    buffer = io.StringIO()
    n = write_export(run_dir, fmt, buffer)
    if target is None:
        path = Confined(run_dir, private=False).write(f"report/results.{fmt}", buffer.getvalue())
    else:
        path = write_output(target, buffer.getvalue())
    _echo(f"{n} records written to {out or path}")
    _note_progress(run_dir)


def _check_out_dir(out: Path) -> None:
    """`--out DIR` for a folder of tables: refuse a file, a run's records, a folder whose parent is missing."""
    check_output_folder(out, field="--out")


def audit(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    provenance: Annotated[Path | None, typer.Option(
        help="JSONL of {dataset, qid, pmid/pmcid/doi/url/title} for upstream-source checks.")] = None,
    stem_chars: Annotated[int | None, typer.Option(
        min=1, help="Contiguous stem match length that fires (default 80).")] = None,
    ngram_containment: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Share of the stem's 8-grams in a passage that fires (default 0.3).")]
    = None,
    strict: Annotated[bool, typer.Option(help="Exit 1 when any direct benchmark-item leak is found.")] = False,
) -> None:
    """Check every retrieved passage for benchmark-item leakage and upstream-source retrieval."""
    from medpanel.experiments.analysis.audit import LEAKAGE_FILE, leakage_table, refresh_leakage
    from medpanel.retrieval.leakage import Thresholds

    data = load_run(run_dir)
    th = None
    if stem_chars is not None or ngram_containment is not None:
        changes: dict[str, Any] = {}
        if stem_chars is not None:
            changes["stem_min_chars"] = stem_chars
        if ngram_containment is not None:
            changes["ngram_min_containment"] = ngram_containment
        th = dataclasses.replace(Thresholds(), **changes)
    doc = refresh_leakage(data.run_dir, data.rows, provenance_file=provenance, thresholds=th)
    _print_tables([leakage_table(doc)], str(run_dir / "report" / LEAKAGE_FILE))
    direct = sum(s["direct_questions"] for s in doc["summary"])
    upstream = sum(s["upstream_questions"] for s in doc["summary"])
    _echo(f"{doc['passages']} passages checked; {direct} (condition, question) pairs with direct leakage, "
          f"{upstream} with upstream-source retrieval. Details: {run_dir / 'report' / LEAKAGE_FILE}")
    if strict and direct:
        raise typer.Exit(1)


def report(run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
           html: Annotated[bool, typer.Option("--html", help="Also write the HTML viewer, plots and leakage "
                                                            "audit.")] = False,
           processes: Annotated[int | None, typer.Option(help="Processes reading the transcripts (default: a CPU "
                                                             "each, at most 8; 1: this one alone).")] = None) -> None:
    """Print and write (report/*.csv, report.md; with --html the viewer and plots) the tables of a run."""
    from medpanel.experiments.analysis.report import read_run_tables
    from medpanel.experiments.cli.output import report_tables

    if processes is not None and processes < 1:
        raise UserError(f"{processes} is not a number of processes. Give 1 or more", field="--processes")
    if html:
        refuse_without_transcripts(run_dir)  # before anything is printed or written
    site: list[Path] | None = None

    def with_site(rows: list[Row], record: RunRecord) -> RunTables:
        # The site's one pass over the transcripts builds the tables too (viewer.build_report_site).
        from medpanel.experiments.view.viewer import build_report_site

        nonlocal site
        site, tables = build_report_site(run_dir, processes=processes)
        if tables is None or not tables.matches(rows):  # the store changed since: the rows printed
            return read_run_tables(run_dir, rows, record, processes=processes)
        return tables

    _written, read = report_tables(run_dir, build=with_site if html else lambda rows, record: read_run_tables(
        run_dir, rows, record, processes=processes))
    if html:
        paths = site if site is not None else write_html_report(run_dir)
        console.print(f"HTML report: {run_dir / 'report' / 'index.html'} ({len(paths)} files)")
    _warn_missing_transcripts(run_dir, "its question pages, transition tables and figures lack them" if html
                              else "its transition and cost tables count them from their rows alone",
                              read.digests if read is not None else None)
    _note_progress(run_dir)


def show(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    qid: Annotated[str, typer.Argument(help="Question id, or dataset__qid.")],
    condition: Annotated[str | None, typer.Option("--condition", help="Only this condition slug.")] = None,
    full: Annotated[bool, typer.Option(help="Also print the messages sent with every call.")] = False,
) -> None:
    """Print a debate turn by turn, with parsed fields and tokens."""
    store = open_store(run_dir, load_record(run_dir))
    try:
        store.sync_transcripts()
        rows = store.rows()
    finally:
        store.close()
    known = sorted({r.condition for r in rows})
    if condition is not None and condition not in known:
        raise UserError(f"no condition {condition!r} in this run. Its conditions are: {', '.join(known) or 'none'}",
                        field="--condition")
    # Ids are matched exactly, and each row says where its transcript is (older runs named them differently).
    matches = sorted((r for r in rows if qid in (r.qid, f"{r.dataset}__{r.qid}")
                      and (condition is None or r.condition == condition)),
                     key=lambda r: (r.condition, r.dataset, r.qid, r.repeat))
    if not matches:
        raise UserError(f"no transcript for {qid!r}{f' in condition {condition}' if condition else ''}. "
                        f"List the ids with: medpanel export {run_dir} --format csv", field="QID")
    missing: list[str] = []
    for row in matches:
        try:
            path: Path | None = transcript_path(run_dir, row)  # its file, or its record in a worker's log
        except UserError:
            path = None
        if path is None or not path.is_file():
            why = "leaves the run directory" if path is None else "is missing"
            missing.append(f"{row.condition} {row.dataset}/{row.qid}: the transcript {run_dir / row.transcript} {why}")
            continue
        print_transcript(load_transcript(path), full=full)
    if missing and len(missing) == len(matches):  # nothing asked for can be shown
        more = f" (and {len(missing) - 1} more of the {len(matches)} asked for)" if len(missing) > 1 else ""
        raise UserError(f"{missing[0]}{more}: nothing to show. Restore transcripts/ from a backup", field="QID")
    for line in missing:
        sys.stderr.write(f"warning: {line}\n")
    _note_progress(run_dir)


def runs(runs_dir: Annotated[Path, typer.Argument(help="Folder of run directories.")] = Path("runs")) -> None:
    """List run directories with their status."""
    if not runs_dir.is_dir():
        what = "is a file, not a folder of runs" if runs_dir.exists() else "does not exist"
        raise UserError(f"{runs_dir} {what}. Runs are created by medpanel run", field="RUNS_DIR")
    table = RichTable(title=Text(one_line(f"runs in {runs_dir}")), title_justify="left")
    for col in ("run", "scenario", "model", "pairs", "state", "created"):
        table.add_column(col)
    damaged: list[UserError] = []
    for d in sorted(p for p in runs_dir.iterdir() if (p / "run.json").is_file()):
        try:
            record = load_record(d)
        except UserError as exc:  # list the others, then say which could not be read
            damaged.append(exc)
            table.add_row(Text(one_line(d.name)), "-", "-", "-", "damaged run.json", "-")
            continue
        try:
            status = read_status(d)
        except UserError:
            status = {"state": "unreadable status.json"}
        status.setdefault("state", "killed")
        if lock_holder(d) is not None:
            status["state"] = "running"
        elif status.get("state") == "running":
            status["state"] = "killed"  # its session wrote "running" and never finished: resume it
        model = record.model
        # Text from the run's files, shown as written: no markup read in it, its controls escaped.
        cells = (d.name, record.name, f"{model.backend or '?'}/{model.name}",
                 str(record.n_pairs if record.n_pairs is not None else "?"), f"{status['state']}"
                 + (f" ({status.get('remaining')} left)" if status.get("remaining") else ""),
                 str(record.created or "")[:19])
        table.add_row(*(Text(one_line(str(c))) for c in cells))
    console.print(table)
    if damaged:
        more = f" (and {len(damaged) - 1} more damaged run.json)" if len(damaged) > 1 else ""
        raise UserError(f"{damaged[0]}{more}")


def register(app: typer.Typer) -> None:
    """Add `report`, `show`, `runs`, `view`, `compare`, `export` and `audit` to the medpanel CLI."""
    app.command("report")(report)
    app.command("show")(show)
    app.command("runs")(runs)
    app.command("view")(view)
    app.command("compare")(compare)
    app.command("export")(export)
    app.command("audit")(audit)
