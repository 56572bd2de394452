"""Render every reader's output of some run directories into one folder, to diff two checkouts.

    python -m benchmarks.render_outputs OUT RUN_DIR [RUN_DIR ...]

Each run is copied into OUT/<name>/run (readers write report/ into the run), then `report`,
`report --html`, `export` (jsonl, csv), `show` of its first question and `compare` of all the runs
write into OUT. Run it with the interpreter of each checkout (`/path/to/checkout/.venv/bin/python
-m benchmarks.render_outputs ...`) into two folders and `diff -r` them: a change to how the
readers load records must leave every byte the same. The copies' paths are the same in both
folders when OUT is, so the HTML's links match. Each HTML page's script nonce is random by design
(its Content-Security-Policy): it is written as `nonce-X` so the pages compare.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
from pathlib import Path

from benchmarks.record_requests import transcripts_by_name
from medpanel.experiments.cli.main import main


def cli(*argv: str) -> str:
    """What the command printed; a command that fails prints its exit code and error's last line
    instead, so a reader that fails on one checkout and not the other shows in the diff."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            if exc.code:
                return f"exit {exc.code}: {err.getvalue().strip().splitlines()[-1:]}\n"
        except Exception as exc:  # a reader's crash is an output to compare, not a reason to stop
            return f"crash: {type(exc).__name__}: {exc}\n"
    return out.getvalue()


def render(out: Path, runs: list[Path]) -> None:
    copies = []
    for src in runs:
        dest = out / src.name / "run"
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("report", "cache", "runner.lock"))
        copies.append(dest)
        (out / src.name / "report.stdout").write_text(cli("report", str(dest)), encoding="utf-8")
        (out / src.name / "html.stdout").write_text(cli("report", str(dest), "--html"), encoding="utf-8")
        (out / src.name / "export.jsonl").write_text(cli("export", str(dest), "--format", "jsonl", "--out", "-"),
                                                     encoding="utf-8")
        (out / src.name / "export.csv").write_text(cli("export", str(dest), "--format", "csv", "--out", "-"),
                                                   encoding="utf-8")
        first = transcripts_by_name(dest)[0][1]  # the first in the order of a file per question
        qid = first["question"]["qid"]
        (out / src.name / "show.txt").write_text(cli("show", str(dest), qid), encoding="utf-8")
        (out / src.name / "show-full.txt").write_text(cli("show", str(dest), qid, "--full"), encoding="utf-8")
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r"nonce([-=]\"?)[A-Za-z0-9_-]+", r"nonce\1X", text), encoding="utf-8")
    if len(copies) > 1:
        (out / "compare.stdout").write_text(cli("compare", *map(str, copies), "--out", str(out / "compare")),
                                            encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    render(args.out, args.runs)
