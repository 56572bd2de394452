"""CLI commands for inspecting runs: `view`, `compare`, `export`, `audit`, and `report --html`.

`register(app)` adds the commands to the main Typer app; `write_html_report(run_dir)` is what
`medpanel report RUN_DIR --html` calls. Heavy imports (jinja2, matplotlib) happen inside the
commands so `medpanel --help` stays fast.
"""

from __future__ import annotations

import errno
import io
import sys
from pathlib import Path
from typing import Annotated

import typer

from medpanel.experiments.errors import UserError

DEFAULT_PORT = 8765


def write_html_report(run_dir: Path, *, provenance: Path | None = None, messages: str = "last") -> list[Path]:
    """Build report/index.html, report/questions/*.html, report/plots/*.{png,svg}, report/leakage.json."""
    from medpanel.experiments.view.viewer import build_site

    return build_site(Path(run_dir), provenance=provenance, messages=messages)  # load_run checks the directory


def _print_tables(tables: list) -> None:
    from medpanel.experiments.cli.main import print_table

    for t in tables:
        print_table(t)


def _echo(text: str) -> None:
    from medpanel.experiments.cli.main import console

    console.print(text, markup=False, highlight=False)


def view(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: any free port).")] = DEFAULT_PORT,
    rebuild: Annotated[bool, typer.Option(help="Rebuild the HTML report before serving.")] = False,
) -> None:
    """Serve the run's HTML report read-only on 127.0.0.1 (builds it first if missing)."""
    from medpanel.experiments.run.rundir import load_meta
    from medpanel.experiments.view.viewer import make_server

    load_meta(run_dir)  # a damaged run is refused even when an old report is there to serve
    report = run_dir / "report"
    if rebuild or not (report / "index.html").is_file():
        paths = write_html_report(run_dir)
        _echo(f"HTML report written: {len(paths)} files in {report}/")
    try:
        server = make_server(report, port)
    except OSError as exc:
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be opened ({exc.strerror or exc})"
        raise UserError(f"port {port} {why}. Choose another with --port N (or --port 0 for any free port)",
                        field="--port") from None
    host, bound = server.server_address[:2]
    _echo(f"Serving {report} read-only at http://{host}:{bound}/index.html  (Ctrl-C to stop)")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


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
    _print_tables(tables)
    if out is not None:
        from medpanel.experiments.analysis.report import write_tables

        _check_out_dir(out)

        written = write_tables(out, tables, title=f"Compare: {', '.join(cmp.labels)}", md_name="compare.md")
        _echo(f"Tables written to {out} ({len(written)} files)")


def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl or csv.")] = "jsonl",
    out: Annotated[Path | None, typer.Option(
        "--out", help="Output file ('-' for stdout); default report/results.<format>.")] = None,
) -> None:
    """One record per (condition, question, repeat) with every row, summary and question field."""
    from medpanel.experiments.analysis.export import FORMATS, write_export

    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}. Use --format jsonl or --format csv", field="--format")
    from medpanel.experiments.run.rundir import load_meta

    load_meta(run_dir)
    if out is not None and str(out) == "-":
        write_export(run_dir, fmt, sys.stdout)
        return
    path = out or run_dir / "report" / f"results.{fmt}"
    if path.is_dir():
        raise UserError(f"{path} is a folder. Give a file name, e.g. --out {path / f'results.{fmt}'}", field="--out")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the folder of {path} ({exc.strerror or exc}). Choose another --out",
                        field="--out") from None
    # Rendered before the file is opened, so a damaged run leaves no empty output behind.
    buffer = io.StringIO()
    n = write_export(run_dir, fmt, buffer)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(buffer.getvalue())
    _echo(f"{n} records written to {path}")


def _check_out_dir(out: Path) -> None:
    """`--out DIR` for a folder of tables: refuse a file, or a folder that cannot be created."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file. Give a folder for the tables", field="--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out} ({exc.strerror or exc}). Choose another --out", field="--out") from None


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
    import dataclasses

    from medpanel.experiments.analysis.audit import LEAKAGE_FILE, leakage_table, refresh_leakage
    from medpanel.experiments.run.rundir import load_run
    from medpanel.retrieval.leakage import Thresholds

    data = load_run(run_dir)
    th = None
    if stem_chars is not None or ngram_containment is not None:
        changes: dict[str, float | int] = {}
        if stem_chars is not None:
            changes["stem_min_chars"] = stem_chars
        if ngram_containment is not None:
            changes["ngram_min_containment"] = ngram_containment
        th = dataclasses.replace(Thresholds(), **changes)
    doc = refresh_leakage(data.run_dir, data.rows, provenance_file=provenance, thresholds=th)
    _print_tables([leakage_table(doc)])
    direct = sum(s["direct_questions"] for s in doc["summary"])
    upstream = sum(s["upstream_questions"] for s in doc["summary"])
    _echo(f"{doc['passages']} passages checked; {direct} (condition, question) pairs with direct leakage, "
          f"{upstream} with upstream-source retrieval. Details: {run_dir / 'report' / LEAKAGE_FILE}")
    if strict and direct:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `view`, `compare`, `export` and `audit` to the medpanel CLI."""
    app.command("view")(view)
    app.command("compare")(compare)
    app.command("export")(export)
    app.command("audit")(audit)
