"""What the CLI prints: tables at the terminal's width, a transcript turn by turn, a run's short
summary, every table of its report, and one-line errors.

Everything that came from a model, a dataset or a corpus is printed as `Text`, never parsed as rich
markup (a "[/b]" in a question would otherwise crash the command, and a tag meant as styling would
be printed literally where markup is off).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.panel import Panel
from rich.text import Text

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.header import header_lines
from medpanel.experiments.analysis.protocol import protocol_line
from medpanel.experiments.cli.console import console as console  # re-exported: the commands print with it
from medpanel.experiments.cli.console import make_console as make_console
from medpanel.experiments.cli.fit import dropped_note, fit
from medpanel.experiments.errors import UserError
from medpanel.experiments.errors import error_line as error_line  # re-exported: the commands print with it
from medpanel.experiments.run.store.records import RunRecord, TranscriptRecord
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import load_record, load_run, read_rows, transcript_paths
from medpanel.inputs import printable as printable  # re-exported: what a command prints from a file

if TYPE_CHECKING:
    from medpanel.experiments.analysis.report import RunTables

# The tables' modules (the analysis, its statistics: seconds of imports) are imported by the
# functions that build tables, so `medpanel show` prints a transcript without them.


def print_table(t: Table, *, where: str = "the CSV and markdown files medpanel report writes",
                compact: bool = False) -> None:
    """The title, the table at the console's width (columns left out whole when it is too narrow,
    with a line naming them and `where` every column is), then the table's note."""
    fitted = fit(t, console, compact=compact)
    console.print(Text(t.title, style="bold"))
    console.print(fitted.table)
    if fitted.dropped:
        console.print(Text(dropped_note(fitted, len(t.columns), console.width, where), style="yellow"))
    if t.note:
        console.print(Text(t.note, style="dim"))


def read_run(run_dir: Path) -> tuple[RunRecord, list[Row]]:
    """A run's record and rows, other machines' transcripts synced first (what `report` reads first)."""
    record = load_record(run_dir)
    # shared storage: other machines' transcripts become files here
    return record, read_rows(run_dir, record, sync=True)


def print_header(record: RunRecord, rows: list[Row] | None = None) -> None:
    """What was run and how it departs from the papers (with `rows`: the screened critiques' rate per
    condition): printed before any number is read."""
    sc = record.scenario
    console.print(Text.assemble(("scenario ", "bold"), str(sc.get("name", record.name)),
                                f": {sc['description']}" if sc.get("description") else ""))
    console.print(Text(f"protocol: {protocol_line(sc, rows or (), record.slugs)}"))
    for line in header_lines(record):
        console.print(line, markup=False, highlight=False)


def _error_rows(run_dir: Path, rows: list[Row]) -> None:
    errors = sum(1 for r in rows if r.error)
    if errors:
        console.print(f"{errors} of {len(rows)} pairs are error rows (no answer, scored wrong; a resume skips them). "
                      f"Re-run them: medpanel run --resume {run_dir} --retry-errors", markup=False, highlight=False)


def summarise(run_dir: Path, *, write: bool = True) -> list[Path] | None:
    """Every table of the run (`medpanel report`), written to report/*.csv and report.md; the files
    written (None when none were)."""
    return report_tables(run_dir, write=write)[0]


def report_tables(run_dir: Path, *, write: bool = True,
                  build: Callable[[list[Row], RunRecord], RunTables] | None = None
                  ) -> tuple[list[Path] | None, RunTables | None]:
    """`summarise`, also handing back what the tables were built from. `build`: what reads the
    transcripts and builds the tables from the rows (default `read_run_tables`; `report --html`
    gives the HTML site's builder, whose one pass over the transcripts also writes the pages)."""
    from medpanel.experiments.analysis.report import read_run_tables

    record, rows = read_run(run_dir)
    if not rows:
        console.print("No finished questions yet.")
        return None, None
    print_header(record, rows)
    read = build(rows, record) if build is not None else read_run_tables(run_dir, rows, record)
    return _print_and_write(run_dir, rows, read.tables, write), read


def _print_and_write(run_dir: Path, rows: list[Row], tables: list[Table], write: bool) -> list[Path] | None:
    from medpanel.experiments.analysis.report import csv_name, write_report

    report = run_dir / "report"
    for t in tables:
        print_table(t, where=f"{report / csv_name(t)} (and report.md beside it)" if write else
                    f"the CSV and markdown files: medpanel report {run_dir}")
    _error_rows(run_dir, rows)
    if write:
        try:
            paths = write_report(run_dir, tables)
        except OSError as exc:  # a full disk or a read-only folder: the tables above still stand
            error_line(f"cannot write the report to {exc.filename or report}: {exc.strerror or exc}")
            return None
        console.print(f"Tables written to {paths[-1].parent}/ ({len(paths)} files)")
        return paths
    return None


def write_full_report(run_dir: Path) -> list[Path] | None:
    """`medpanel report`'s files, written without printing (what a tracker logs after a run)."""
    from medpanel.experiments.analysis.report import run_tables, write_report

    record, rows = read_run(run_dir)
    if not rows:
        return None
    try:
        return write_report(run_dir, run_tables(run_dir, rows, record))
    except OSError as exc:
        error_line(f"cannot write the report to {exc.filename or run_dir / 'report'}: {exc.strerror or exc}")
        return None


def print_summary(run_dir: Path, *, n_boot: int = 10000) -> None:
    """The end of `medpanel run`: accuracy with its CI, invalid and errors, and the cost per
    condition; the paired verdicts; and the commands that print every table and open the viewer."""
    from medpanel.experiments.analysis.run_summary import batch_line, batched, priced, run_summary
    from medpanel.experiments.analysis.study import ledger_lines, prices_of, transcript_events

    record, rows = read_run(run_dir)
    if not rows:
        console.print("No finished questions yet.")
        return
    print_header(record, rows)
    summary = run_summary(rows, record, n_boot=n_boot)
    where = f"medpanel report {run_dir}"
    print_table(summary.accuracy, where=where, compact=True)
    if summary.verdicts is not None:
        print_table(summary.verdicts, where=where, compact=True)
        if summary.more_verdicts:
            console.print(f"{summary.more_verdicts} more comparisons in the full report", markup=False)
    if batched(record):  # what the batches saved, from the transcripts' calls (the cost ledger)
        note = batch_line(ledger_lines(rows, transcript_events(run_dir), prices_of(record.prices)),
                          priced=priced(record))
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
    _error_rows(run_dir, rows)
    console.print(f"Every table: medpanel report {run_dir}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"The viewer:  medpanel view {run_dir}", markup=False, highlight=False, soft_wrap=True)


def print_transcript(record: TranscriptRecord, *, full: bool = False) -> None:
    # Everything below comes from a model, a dataset or a corpus: it is printed as Text, never
    # parsed as rich markup (a "[/b]" in a question would otherwise crash the command, and a tag
    # meant as styling would be printed literally where markup is off). No escape sequence from a
    # model or a dataset reaches the terminal: the record is read back with every string escaped.
    t = TranscriptRecord.model_validate(printable(record.model_dump(mode="json")))
    q = t.question
    verdict = "ERROR" if t.error else "INVALID" if t.invalid else "correct" if t.correct else "wrong"
    head = Text.assemble((t.condition, "bold"),
                         f"  {q.dataset}/{q.qid}  answer {','.join(t.answer) or '-'}  "
                         f"gold {','.join(t.gold)}  -> {verdict}   calls {t.calls}  tokens {t.tokens}")
    opts = "\n".join(f"  ({k}) {v}" for k, v in q.options.items())
    console.print(head)
    console.print(Panel(Text(f"{q.text}\n\n{opts}"), title="question", title_align="left"))
    for e in t.events:
        where = f"r{e.round}t{e.turn}" if e.round else ""
        tag = f"{e.kind:<8} {e.role:<11} {e.agent:<22} {e.step:<18} {where}"
        if e.kind == "call":
            meta = (f"tok {e.usage.prompt_tokens}+{e.usage.completion_tokens}  "
                    f"{e.latency_s:.2f}s{'  cached' if e.cache_hit else ''}{'  INVALID' if e.invalid else ''}")
            body = json.dumps(e.parsed, ensure_ascii=False, indent=1) if e.parsed else e.content
            if e.error:
                body += f"\n[{e.error}]"
            if full:  # the messages sent, in the request's own (OpenAI) shape
                body = "\n".join(f"<{m['role']}{':' + str(m['name']) if m.get('name') else ''}> {m['content']}"
                                 for m in e.messages) + "\n---\n" + body
            console.print(Panel(Text(body), title=Text(f"{tag}  {meta}"), title_align="left",
                                border_style=_colour(e.role)))
        else:
            data = f"  {json.dumps(e.data, ensure_ascii=False)}" if e.data else ""
            console.print(Text.assemble((tag, "bold"), f" {e.content}{data}"))
    if t.error:
        console.print(Text(f"error: {t.error}"))


def _colour(role: str) -> str:
    return {"challenger": "red", "moderator": "magenta", "recruiter": "yellow", "selector": "cyan"}.get(role, "blue")


def refuse_without_transcripts(run_dir: Path) -> None:
    """`report --html` shows the debates: with none of them there, nothing asked for can be shown."""
    rows = load_run(run_dir).rows
    path_of = transcript_paths(run_dir)
    paths = [path_of(row) for row in rows]  # a row pointing out of the run is refused here, before any write
    # The first transcript there answers it: no need to look for all of a finished run's thousands.
    total = len(rows)
    if total and not any(path.is_file() for path in paths):
        raise UserError(f"none of the run's {total} transcripts is there (deleted, or a copy made without them), so "
                        "the HTML report has no debate to show. Restore transcripts/ from a backup, or run medpanel "
                        f"report {run_dir} without --html for the tables", file=str(run_dir / "transcripts"))
