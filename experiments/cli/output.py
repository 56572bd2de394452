"""What the CLI prints: tables, a transcript turn by turn, a run's summary, and one-line errors.

Everything that came from a model, a dataset or a corpus is printed as `Text`, never parsed as rich
markup (a "[/b]" in a question would otherwise crash the command, and a tag meant as styling would
be printed literally where markup is off).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from medpanel.experiments.analysis.header import header_lines
from medpanel.experiments.analysis.protocol import protocol_line
from medpanel.experiments.analysis.report import build_tables, write_report
from medpanel.experiments.analysis.transitions import call_events, run_docs
from medpanel.experiments.errors import error_line as error_line  # re-exported: the commands print with it
from medpanel.experiments.run.rundir import load_meta, open_store

# Piped output (CI logs, `| tee`) would otherwise wrap tables at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)


def print_table(t: Any) -> None:
    table = RichTable(title=t.title, title_justify="left", show_lines=False)
    for col in t.columns:
        table.add_column(col, overflow="fold")
    for row in t.rows:
        table.add_row(*[Text(f"{v:.2f}" if isinstance(v, float) else str(v)) for v in row])
    console.print(table)
    if t.note:
        console.print(Text(t.note, style="dim"))


def summarise(run_dir: Path, *, write: bool = True) -> None:
    meta = load_meta(run_dir)
    store = open_store(run_dir, meta)
    store.sync_transcripts()  # shared storage: other machines' transcripts become files here
    rows = store.rows()
    store.close()
    if not rows:
        console.print("No finished questions yet.")
        return

    sc = meta.get("scenario", {})
    # The header says what was run and how it departs from the papers before any number is read.
    console.print(Text.assemble(("scenario ", "bold"), str(sc.get("name", meta.get("name", ""))),
                                f": {sc['description']}" if sc.get("description") else ""))
    console.print(Text(f"protocol: {protocol_line(sc)}"))
    for line in header_lines(meta):
        console.print(line, markup=False, highlight=False)
    docs = run_docs(run_dir, rows)
    tables = build_tables(rows, meta, docs=docs, events=call_events(rows, docs))
    for t in tables:
        print_table(t)
    errors = sum(1 for r in rows if r.error)
    if errors:
        console.print(f"{errors} of {len(rows)} pairs are error rows (no answer; scored wrong, and a resume skips "
                      f"them). Re-run them with: medpanel run --resume {run_dir} --retry-errors", markup=False)
    if write:
        try:
            paths = write_report(run_dir, tables)
        except OSError as exc:  # a full disk or a read-only folder: the tables above still stand
            error_line(f"cannot write the report to {exc.filename or run_dir / 'report'}: {exc.strerror or exc}")
            return
        console.print(f"Tables written to {paths[-1].parent}/ ({len(paths)} files)")


def print_transcript(doc: dict[str, Any], *, full: bool = False) -> None:
    # Everything below comes from a model, a dataset or a corpus: it is printed as Text, never
    # parsed as rich markup (a "[/b]" in a question would otherwise crash the command, and a tag
    # meant as styling would be printed literally where markup is off).
    doc = printable(doc)  # no escape sequence from a model or a dataset reaches the terminal
    q = doc["question"]
    verdict = "ERROR" if doc.get("error") else "INVALID" if doc["invalid"] else "correct" if doc["correct"] else "wrong"
    head = Text.assemble((str(doc["condition"]), "bold"),
                         f"  {q['dataset']}/{q['qid']}  answer {','.join(doc['answer']) or '-'}  "
                         f"gold {','.join(doc['gold'])}  -> {verdict}   calls {doc['calls']}  tokens {doc['tokens']}")
    opts = "\n".join(f"  ({k}) {v}" for k, v in q["options"].items())
    console.print(head)
    console.print(Panel(Text(f"{q['text']}\n\n{opts}"), title="question", title_align="left"))
    for e in doc["events"]:
        where = f"r{e['round']}t{e['turn']}" if e.get("round") else ""
        tag = f"{e['kind']:<8} {e['role']:<11} {e['agent']:<22} {e['step']:<18} {where}"
        if e["kind"] == "call":
            usage = e.get("usage", {})
            meta = (f"tok {usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)}  "
                    f"{e.get('latency_s', 0):.2f}s{'  cached' if e.get('cache_hit') else ''}"
                    f"{'  INVALID' if e.get('invalid') else ''}")
            body = json.dumps(e["parsed"], ensure_ascii=False, indent=1) if e.get("parsed") else e.get("content", "")
            if e.get("error"):
                body += f"\n[{e['error']}]"
            if full:
                body = "\n".join(f"<{m['role']}{':' + m['name'] if m.get('name') else ''}> {m['content']}"
                                 for m in e.get("messages", [])) + "\n---\n" + body
            console.print(Panel(Text(body), title=Text(f"{tag}  {meta}"), title_align="left",
                                border_style=_colour(e["role"])))
        else:
            data = f"  {json.dumps(e['data'], ensure_ascii=False)}" if e.get("data") else ""
            console.print(Text.assemble((tag, "bold"), f" {e.get('content', '')}{data}"))
    if doc.get("error"):
        console.print(Text(f"error: {doc['error']}"))


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(value: Any) -> Any:
    """Every string of a JSON-like value with its control characters shown escaped (`\\x1b`): ANSI and
    OSC sequences in model or option text would otherwise recolour, retitle or rewrite the terminal."""
    if isinstance(value, str):
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def _colour(role: str) -> str:
    return {"challenger": "red", "moderator": "magenta", "recruiter": "yellow", "selector": "cyan"}.get(role, "blue")
