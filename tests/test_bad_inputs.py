"""The hostile-input probe: every user mistake is one line on stderr, exit code 2, no traceback.

Each bad input below is tried through `medpanel.experiments.cli.main`, the function the `medpanel`
console script calls, so in-process runs see exactly what a user sees (the same exception
handling, the same exit codes); a few cases also go through the real console script in a
subprocess. A case passes when the command exits 2, prints exactly one line on stderr that starts
with `error:` and names what is expected (the option, the file or the field), and no traceback.
The legal edge inputs at the end must finish with exit 0.

`MEDPANEL_PROBE_SHAPE_ONLY=1` checks only the shape (exit 2, one line, no traceback), which is
what the issue's before/after table counts.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from medpanel.experiments.cli.main import main
from tests.transcript_files import first_transcript, overwrite

SHAPE_ONLY = os.environ.get("MEDPANEL_PROBE_SHAPE_ONLY") == "1"

GOOD = """name: probe
pipeline: generalist
flags: {c: [0, 1]}
dataset: {source: sample, limit: 1}
model: {backend: scripted}
run: {workers: 1}
"""

QUESTION = {"realidx": "q1", "question": "Which?", "options": {"A": "x", "B": "y"}, "answer_idx": "A"}


@dataclass
class Result:
    rc: int | None
    out: str
    err: str
    tb: str = ""


def invoke(argv: list[str]) -> Result:
    """`main(argv)` as the console script runs it; an escaping exception is what a user sees as a traceback."""
    out, err = io.StringIO(), io.StringIO()
    tb = ""
    rc: int | None
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # the probe records what would have been a traceback
            rc, tb = None, traceback.format_exc()
    return Result(rc, out.getvalue(), err.getvalue(), tb)


class Workspace:
    """One case's folder: a good scenario, a copy of a finished run, and files to break."""

    def __init__(self, root: Path, base_run: Path) -> None:
        self.root = root
        self._base_run = base_run

    def path(self, name: str) -> Path:
        return self.root / name

    def text(self, name: str, body: str) -> str:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
        return str(p)

    def bytes(self, name: str, body: bytes) -> str:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)
        return str(p)

    def scenario(self, body: str = GOOD, name: str = "s.yaml") -> str:
        return self.text(name, body)

    def with_dataset(self, dataset: str, name: str = "s.yaml") -> str:
        return self.scenario(GOOD.replace("dataset: {source: sample, limit: 1}", f"dataset: {dataset}"), name)

    def run(self, name: str = "run") -> Path:
        dest = self.root / name
        if not dest.exists():
            shutil.copytree(self._base_run, dest)
        return dest


Build = Callable[[Workspace], list[str]]


@dataclass
class Case:
    id: str
    build: Build
    expect: str
    """A substring (case-insensitive) the one error line must contain: the option, file or field."""


BAD: list[Case] = []
LEGAL: list[tuple[str, Build]] = []


def bad(case_id: str, expect: str) -> Callable[[Build], Build]:
    def deco(fn: Build) -> Build:
        BAD.append(Case(case_id, fn, expect))
        return fn
    return deco


def legal(case_id: str) -> Callable[[Build], Build]:
    def deco(fn: Build) -> Build:
        LEGAL.append((case_id, fn))
        return fn
    return deco


def table(rows: list[tuple[str, str, Build]]) -> None:
    BAD.extend(Case(i, b, e) for i, e, b in rows)


def _corrupt_pages(db: Path) -> None:
    """Overwrite every page after the first (the schema page) with seeded garbage."""
    data = bytearray(db.read_bytes())
    rng = random.Random(13)
    for i in range(4096, len(data)):
        data[i] = rng.randrange(256)
    db.write_bytes(bytes(data))


def _qid(ws: Workspace) -> str:
    with sqlite3.connect(ws.run() / "study.db") as conn:
        return str(conn.execute("select qid from mp_results limit 1").fetchone()[0])


def _first_transcript(run: Path) -> Path:
    return first_transcript(run)


# -- CLI usage: what typer/click refuse before a command runs ---------------------------------

table([
    ("usage-limit-not-int", "--limit", lambda ws: ["run", ws.scenario(), "--limit", "abc"]),
    ("usage-unknown-option", "--bogus", lambda ws: ["run", ws.scenario(), "--bogus"]),
    ("usage-unknown-command", "frob", lambda ws: ["frob"]),
    ("usage-missing-argument", "RUN_DIR", lambda ws: ["show"]),
    ("usage-workers-not-int", "--workers", lambda ws: ["run", ws.scenario(), "--workers", "x"]),
    ("usage-corpus-unknown-command", "frob", lambda ws: ["corpus", "frob"]),
    ("usage-corpus-search-missing", "NAME", lambda ws: ["corpus", "search"]),
    ("usage-option-needs-value", "--format", lambda ws: ["export", str(ws.run()), "--format"]),
    ("usage-port-not-int", "--port", lambda ws: ["view", str(ws.run()), "--port", "abc"]),
    ("usage-port-too-big", "--port", lambda ws: ["view", str(ws.run()), "--port", "99999"]),
    ("usage-port-negative", "--port", lambda ws: ["view", str(ws.run()), "--port", "-1"]),
    ("usage-corpus-k-zero", "-k", lambda ws: ["corpus", "search", "x", "q", "-k", "0"]),
    ("usage-report-missing", "RUN_DIR", lambda ws: ["report"]),
    ("usage-compare-unknown-option", "--bogus", lambda ws: ["compare", str(ws.run()), str(ws.run("b")), "--bogus"]),
    ("usage-audit-float", "--ngram-containment", lambda ws: ["audit", str(ws.run()), "--ngram-containment", "abc"]),
    ("usage-validate-missing", "SCENARIO", lambda ws: ["validate"]),
    ("usage-run-nothing", "SCENARIO", lambda ws: ["run"]),
    ("usage-run-both", "SCENARIO", lambda ws: ["run", ws.scenario(), "--resume", str(ws.run())]),
    ("usage-extra-argument", "extra argument", lambda ws: ["runs", str(ws.root), "more"]),
    ("usage-flag-with-value", "--quiet", lambda ws: ["run", ws.scenario(), "--quiet=yes"]),
    ("usage-export-format", "--format", lambda ws: ["export", str(ws.run()), "--format", "xml"]),
    ("usage-corpus-retriever", "--retriever", lambda ws: ["corpus", "search", "x", "q", "--retriever", "foo"]),
    ("usage-max-calls-float", "--max-calls", lambda ws: ["run", ws.scenario(), "--max-calls", "1.5"]),
    ("usage-audit-stem-chars-zero", "--stem-chars", lambda ws: ["audit", str(ws.run()), "--stem-chars", "0"]),
    ("usage-audit-containment-above-1", "--ngram-containment",
     lambda ws: ["audit", str(ws.run()), "--ngram-containment", "2"]),
])

# -- CLI overrides: the same bounds as the YAML keys they override -----------------------------

table([
    ("override-workers-0", "--workers", lambda ws: ["run", ws.scenario(), "--workers", "0"]),
    ("override-workers-1000", "--workers", lambda ws: ["run", ws.scenario(), "--workers", "1000"]),
    ("override-max-calls-negative", "--max-calls", lambda ws: ["run", ws.scenario(), "--max-calls", "-5"]),
    ("override-max-calls-0", "--max-calls", lambda ws: ["run", ws.scenario(), "--max-calls", "0"]),
    ("override-max-wall-negative", "--max-wall-s", lambda ws: ["run", ws.scenario(), "--max-wall-s", "-1"]),
    ("override-max-wall-nan", "--max-wall-s", lambda ws: ["run", ws.scenario(), "--max-wall-s", "nan"]),
    ("override-repeat-0", "--repeat", lambda ws: ["run", ws.scenario(), "--repeat", "0"]),
    ("override-rpm-0", "--rpm", lambda ws: ["run", ws.scenario(), "--rpm", "0"]),
    ("override-rpm-negative", "--rpm", lambda ws: ["run", ws.scenario(), "--rpm", "-3"]),
    ("override-max-tokens-0", "--max-tokens", lambda ws: ["run", ws.scenario(), "--max-tokens", "0"]),
    ("override-max-cost-negative", "--max-cost-usd", lambda ws: ["run", ws.scenario(), "--max-cost-usd", "-1"]),
    ("override-max-errors-negative", "--max-errors", lambda ws: ["run", ws.scenario(), "--max-errors", "-1"]),
    ("override-limit-0", "--limit", lambda ws: ["run", ws.scenario(), "--limit", "0"]),
    ("override-validate-limit-negative", "--limit", lambda ws: ["validate", ws.scenario(), "--limit", "-2"]),
    ("override-resume-workers-0", "--workers", lambda ws: ["run", "--resume", str(ws.run()), "--workers", "0"]),
    ("override-resume-max-calls", "--max-calls", lambda ws: ["run", "--resume", str(ws.run()), "--max-calls", "-5"]),
    ("override-resume-rpm-0", "--rpm", lambda ws: ["run", "--resume", str(ws.run()), "--rpm", "0"]),
    ("override-resume-wall-0", "--max-wall-s", lambda ws: ["run", "--resume", str(ws.run()), "--max-wall-s", "0"]),
    ("override-worker-workers-0", "--workers", lambda ws: ["worker", str(ws.run()), "--workers", "0"]),
])


# -- storage URLs and run directories ----------------------------------------------------------

@bad("storage-unparsable", "--storage")
def _storage_unparsable(ws: Workspace) -> list[str]:
    return ["run", ws.scenario(), "--storage", "::::", "--run-dir", str(ws.path("new")), "--quiet"]


table([
    ("storage-unknown-dialect", "--storage",
     lambda ws: ["run", ws.scenario(), "--storage", "nosuch://x", "--run-dir", str(ws.path("new")), "--quiet"]),
    ("storage-sqlite-missing-folder", "storage",
     lambda ws: ["run", ws.scenario(), "--storage", f"sqlite:///{ws.path('no/such/dir/x.db')}",
                 "--run-dir", str(ws.path("new")), "--quiet"]),
    ("storage-yaml-unparsable", "run.storage",
     lambda ws: ["validate", ws.scenario(GOOD.replace("run: {workers: 1}", "run: {storage: 'not a url'}"))]),
    ("storage-postgres-refused", "storage",
     lambda ws: ["run", ws.scenario(), "--storage", "postgresql://u@127.0.0.1:1/db", "--run-dir",
                 str(ws.path("new")), "--quiet"]),
    ("run-dir-is-a-file", "--run-dir",
     lambda ws: ["run", ws.scenario(), "--run-dir", ws.text("afile", "x"), "--quiet"]),
    ("run-dir-under-a-file", "--run-dir",
     lambda ws: ["run", ws.scenario(), "--run-dir", ws.text("afile", "x") + "/sub", "--quiet"]),
    ("run-dir-holds-a-run", "--run-dir", lambda ws: ["run", ws.scenario(), "--run-dir", str(ws.run()), "--quiet"]),
])

# -- scenario files ----------------------------------------------------------------------------

BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"]
                 + [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                    f"*{chr(97 + i)}]" for i in range(5)])
table([
    ("yaml-missing-file", "nope.yaml", lambda ws: ["validate", str(ws.path("nope.yaml"))]),
    ("yaml-is-a-directory", "scen", lambda ws: ["validate", str(Path(ws.text("scen/x", "")).parent)]),
    ("yaml-latin1", "utf-8", lambda ws: ["validate", ws.bytes("s.yaml", "name: caf\xe9\n".encode("latin-1"))]),
    ("yaml-binary", "s.png",
     lambda ws: ["validate", ws.bytes("s.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00" + bytes(range(256)))]),
    ("yaml-binary-utf8-nul", "s.yaml", lambda ws: ["validate", ws.bytes("s.yaml", b"name: a\x00\x00\x01b\n")]),
    ("yaml-empty", "s.yaml", lambda ws: ["validate", ws.scenario("")]),
    ("yaml-top-level-list", "s.yaml", lambda ws: ["validate", ws.scenario("- name: x\n")]),
    ("yaml-malformed", "line", lambda ws: ["validate", ws.scenario("name: x\nflags: {c: [0, 1]\n")]),
    ("yaml-duplicate-top-key", "line 2", lambda ws: ["validate", ws.scenario("name: a\nname: b\n")]),
    ("yaml-duplicate-nested-key", "max_calls",
     lambda ws: ["run", ws.scenario(GOOD.replace("run: {workers: 1}", "run:\n  max_calls: 5\n  workers: 1\n"
                                                  "  max_calls: 900\n")), "--quiet"]),
    ("yaml-alias-bomb", "alias", lambda ws: ["validate", ws.scenario("name: bomb\nsettings:\n  " +
                                                                     BOMB.replace("\n", "\n  ") + "\n")]),
    ("yaml-8mb", "bytes", lambda ws: ["validate", ws.scenario(GOOD + "#" + "x" * 8_000_000 + "\n")]),
    ("yaml-huge-string", "description",
     lambda ws: ["validate", ws.scenario(GOOD + "description: " + "x" * 300_000 + "\n")]),
    ("yaml-huge-list", "10,000",
     lambda ws: ["validate", ws.scenario(GOOD + "settings: {extra: [" + "0," * 200_000 + "0]}\n")]),
    ("yaml-deep-nesting", "nest",
     lambda ws: ["validate", ws.scenario("name: x\nsettings: " + "[" * 5000 + "]" * 5000)]),
    ("yaml-flag-values", "flags.c",
     lambda ws: ["run", ws.scenario(GOOD.replace("{c: [0, 1]}", "{c: [0, 2, -1]}")), "--quiet"]),
    ("yaml-flag-string-on-binary", "flags.c", lambda ws: ["validate", ws.scenario(GOOD.replace("{c: [0, 1]}",
                                                                                                "{c: [0, maybe]}"))]),
    ("yaml-flag-grid-explosion", "conditions",
     lambda ws: ["validate", ws.scenario("name: x\nflags: {" + ", ".join(f"f{chr(97 + i)}: [0, 1]" for i in range(20))
                                         + "}\n")]),
    ("yaml-compare-unknown", "c7",
     lambda ws: ["validate", ws.scenario(GOOD + "compare: [[c0, c7]]\n")]),
    ("yaml-compare-triple", "compare", lambda ws: ["validate", ws.scenario(GOOD + "compare: [[c0, c1, c0]]\n")]),
    ("yaml-unknown-key", "pipelin", lambda ws: ["validate", ws.scenario(GOOD + "pipelin: panel\n")]),
    ("yaml-unknown-nested-key", "run.wrkers",
     lambda ws: ["validate", ws.scenario(GOOD.replace("run: {workers: 1}", "run: {wrkers: 1}"))]),
    ("yaml-bad-name", "name", lambda ws: ["validate", ws.scenario(GOOD.replace("name: probe", "name: a/b"))]),
    ("yaml-no-name", "name", lambda ws: ["validate", ws.scenario(GOOD.replace("name: probe\n", ""))]),
    ("yaml-workers-0", "run.workers",
     lambda ws: ["validate", ws.scenario(GOOD.replace("run: {workers: 1}", "run: {workers: 0}"))]),
    ("yaml-env-unset", "MEDPANEL_PROBE_UNSET",
     lambda ws: ["validate", ws.scenario(GOOD + "description: ${MEDPANEL_PROBE_UNSET}\n")]),
    ("set-broken-yaml", "--set", lambda ws: ["validate", ws.scenario(), "--set", "run.workers=[1,"]),
    ("set-no-equals", "--set", lambda ws: ["validate", ws.scenario(), "--set", "run.workers"]),
    ("set-wrong-type", "run.workers", lambda ws: ["validate", ws.scenario(), "--set", "run.workers=abc"]),
    ("set-through-scalar", "--set", lambda ws: ["validate", ws.scenario(), "--set", "name.x=1"]),
    ("set-duplicate-inside-value", "--set",
     lambda ws: ["validate", ws.scenario(), "--set", "run={workers: 1, workers: 2}"]),
    ("set-alias-bomb", "--set", lambda ws: ["validate", ws.scenario(), "--set", "settings={" + BOMB.replace(
        "\n", ", ") + "}"]),
    ("yaml-unknown-pipeline", "pipeline",
     lambda ws: ["validate", ws.scenario(GOOD.replace("pipeline: generalist", "pipeline: nope"))]),
    ("yaml-unknown-flag", "flags", lambda ws: ["validate", ws.scenario(GOOD.replace("{c: [0, 1]}", "{r: [0, 1]}"))]),
    ("yaml-unknown-variant", "variants", lambda ws: ["validate", ws.scenario(GOOD + "variants: [zzz]\n")]),
    ("yaml-bad-setting", "settings", lambda ws: ["validate", ws.scenario(GOOD + "settings: {roundz: 2}\n")]),
    ("yaml-python-tag", "s.yaml",
     lambda ws: ["validate", ws.scenario("name: x\ndescription: !!python/object/apply:os.system [echo]\n")]),
    ("yaml-non-string-key", "s.yaml", lambda ws: ["validate", ws.scenario(GOOD + "1: x\n")]),
    ("yaml-two-documents", "s.yaml", lambda ws: ["validate", ws.scenario("name: a\n---\nname: b\n")]),
    ("yaml-limit-0", "dataset.limit",
     lambda ws: ["validate", ws.scenario(GOOD.replace("limit: 1", "limit: 0"))]),
    ("yaml-backend-unknown", "model.backend",
     lambda ws: ["validate", ws.scenario(GOOD.replace("backend: scripted", "backend: nope"))]),
    ("yaml-dev-zero", "/dev/zero", lambda ws: ["validate", "/dev/zero"]),
    ("yaml-base-url-no-scheme", "model.base_url",
     lambda ws: ["validate", ws.scenario(GOOD.replace("backend: scripted",
                                                      "backend: openai, base_url: localhost:8000/v1"))]),
    ("yaml-cost-limit-without-prices", "run.max_cost_usd",
     lambda ws: ["validate", ws.scenario(GOOD.replace("run: {workers: 1}", "run: {max_cost_usd: 5}"))]),
    ("override-cost-limit-without-prices", "--max-cost-usd",
     lambda ws: ["run", ws.scenario(), "--max-cost-usd", "5", "--run-dir", str(ws.path("r")), "--quiet"]),
    ("override-resume-limit", "--limit", lambda ws: ["run", "--resume", str(ws.run()), "--limit", "3"]),
    ("override-resume-set", "--set", lambda ws: ["run", "--resume", str(ws.run()), "--set", "run.workers=2"]),
    ("yaml-run-latin1", "utf-8", lambda ws: ["run", ws.bytes("s.yaml", GOOD.encode() + b"# \xe9\n"), "--quiet"]),
])

# -- dataset files -----------------------------------------------------------------------------

table([
    ("data-jsonl-missing", "q.jsonl", lambda ws: ["validate", ws.with_dataset("{source: jsonl, path: q.jsonl}")]),
    ("data-jsonl-is-dir", "qdir",
     lambda ws: [ws.path("qdir").mkdir(), "validate", ws.with_dataset("{source: jsonl, path: qdir}")][1:]),
    ("data-jsonl-latin1", "q.jsonl",
     lambda ws: [ws.bytes("q.jsonl", json.dumps({**QUESTION, "question": "caf\xe9?"}, ensure_ascii=False)
                          .encode("latin-1") + b"\n"),
                 "validate", ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-jsonl-binary", "q.jsonl",
     lambda ws: [ws.bytes("q.jsonl", bytes(range(256)) * 4), "validate",
                 ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-jsonl-malformed", "q.jsonl:2",
     lambda ws: [ws.text("q.jsonl", json.dumps(QUESTION) + "\n{oops\n"), "validate",
                 ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-jsonl-missing-field", "answer_idx",
     lambda ws: [ws.text("q.jsonl", json.dumps({k: v for k, v in QUESTION.items() if k != "answer_idx"}) + "\n"),
                 "validate", ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-jsonl-gold-not-option", "answer_idx",
     lambda ws: [ws.text("q.jsonl", json.dumps({**QUESTION, "answer_idx": "Z"}) + "\n"), "validate",
                 ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-jsonl-empty", "dataset",
     lambda ws: [ws.text("q.jsonl", "\n"), "validate", ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-jsonl-list-line", "q.jsonl:1",
     lambda ws: [ws.text("q.jsonl", "[1, 2]\n"), "validate", ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-jsonl-duplicate-id", "realidx",
     lambda ws: [ws.text("q.jsonl", (json.dumps(QUESTION) + "\n") * 2), "validate",
                 ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:]),
    ("data-mab-missing-dir", "mab", lambda ws: ["validate", ws.with_dataset("{source: medagentsbench, path: mab}")]),
    ("data-mab-unknown-subset", "dataset.subsets",
     lambda ws: [ws.text("mab/medqa/test_hard.jsonl", json.dumps(QUESTION) + "\n"), "validate",
                 ws.with_dataset("{source: medagentsbench, path: mab, subsets: [nope]}")][1:]),
    ("data-mab-latin1", "test_hard.jsonl",
     lambda ws: [ws.bytes("mab/medqa/test_hard.jsonl", b'{"realidx": "\xe9"}\n'), "validate",
                 ws.with_dataset("{source: medagentsbench, path: mab}")][1:]),
    ("data-freetext-latin1", "t.jsonl",
     lambda ws: [ws.bytes("t.jsonl", b'{"id": "\xe9"}\n'), "validate",
                 ws.scenario("name: ft\npipeline: clear\nvariants: [clear-default]\n"
                             "dataset: {source: freetext, path: t.jsonl}\nmodel: {backend: scripted}\n")][1:]),
    ("data-freetext-missing", "t.jsonl",
     lambda ws: ["validate", ws.scenario("name: ft\npipeline: clear\nvariants: [clear-default]\n"
                                         "dataset: {source: freetext, path: t.jsonl}\nmodel: {backend: scripted}\n")]),
    ("data-run-latin1", "q.jsonl",
     lambda ws: [ws.bytes("q.jsonl", b'{"realidx": "\xe9"}\n'), "run",
                 ws.with_dataset("{source: jsonl, path: q.jsonl}"), "--quiet"][1:]),
])

# -- run directories, broken in every way a disk or a user breaks them ---------------------------


def _no_run_json(ws: Workspace) -> str:
    d = ws.path("empty-run")
    d.mkdir()
    return str(d)


def _garbage_run_json(ws: Workspace) -> str:
    run = ws.run()
    (run / "run.json").write_bytes(b"\x00garbage{")
    return str(run)


def _run_json(body: bytes) -> Callable[[Workspace], str]:
    def make(ws: Workspace) -> str:
        run = ws.run()
        (run / "run.json").write_bytes(body)
        return str(run)
    return make


def _garbage_db(ws: Workspace) -> str:
    run = ws.run()
    (run / "study.db").write_bytes(b"this is not a database" * 200)
    return str(run)


def _damaged_db(ws: Workspace) -> str:
    run = ws.run()
    _corrupt_pages(run / "study.db")
    return str(run)


def _no_questions(ws: Workspace) -> str:
    run = ws.run()
    (run / "questions.jsonl").unlink()
    return str(run)


def _garbage_questions(ws: Workspace) -> str:
    run = ws.run()
    (run / "questions.jsonl").write_text("{not json\n")
    return str(run)


def _run_is_file(ws: Workspace) -> str:
    return ws.text("run-file", "x")


def _run_missing(ws: Workspace) -> str:
    return str(ws.path("no-such-run"))


def _garbage_transcript(ws: Workspace) -> str:
    run = ws.run()
    overwrite(_first_transcript(run), b"{\xe9 broken")
    return str(run)


def _garbage_status(ws: Workspace) -> str:
    run = ws.run()
    (run / "status.json").write_text("{broken")
    return str(run)


def _commands(make: Callable[[Workspace], str], commands: list[str]) -> list[tuple[str, Build]]:
    argv: dict[str, Build] = {
        "resume": lambda ws: ["run", "--resume", make(ws), "--quiet"],
        "report": lambda ws: ["report", make(ws)],
        "report-html": lambda ws: ["report", make(ws), "--html"],
        "show": lambda ws: ["show", make(ws), _qid(ws)],
        "view": lambda ws: ["view", make(ws), "--rebuild", "--port", "0"],
        "compare": lambda ws: ["compare", str(ws.run("other")), make(ws)],
        "export": lambda ws: ["export", make(ws), "--out", str(ws.path("x.jsonl"))],
        "audit": lambda ws: ["audit", make(ws)],
        "worker": lambda ws: ["worker", make(ws)],
    }
    return [(c, argv[c]) for c in commands]


def _empty_questions(ws: Workspace) -> str:
    run = ws.run()
    (run / "questions.jsonl").write_text("\n")
    return str(run)


def _no_db(ws: Workspace) -> str:
    run = ws.run()
    (run / "study.db").unlink()
    return str(run)


RUN_DAMAGE: list[tuple[str, Callable[[Workspace], str], str, list[str]]] = [
    ("no-run-json", _no_run_json, "run.json",
     ["resume", "report", "view", "export", "audit", "worker", "compare"]),
    ("garbage-run-json", _garbage_run_json, "run.json",
     ["resume", "report", "view", "export", "audit", "worker", "compare"]),
    ("run-json-list", _run_json(b"[]"), "run.json", ["resume", "report"]),
    ("run-json-empty-object", _run_json(b"{}"), "run.json", ["resume", "report", "export"]),
    ("run-json-latin1", _run_json(b'{"name": "\xe9"}'), "run.json", ["report"]),
    ("garbage-db", _garbage_db, "study.db", ["resume", "report", "view", "export", "audit", "compare"]),
    ("damaged-db", _damaged_db, "study.db", ["resume", "report", "export"]),
    ("no-questions", _no_questions, "questions.jsonl", ["resume", "worker"]),
    ("garbage-questions", _garbage_questions, "questions.jsonl", ["resume"]),
    ("empty-questions", _empty_questions, "questions.jsonl", ["resume"]),
    ("no-db", _no_db, "study.db", ["resume", "report", "export", "audit", "compare"]),
    ("run-is-file", _run_is_file, "run-file", ["resume", "report", "show", "view", "export", "audit"]),
    ("run-missing", _run_missing, "no-such-run", ["report", "show", "export"]),
    ("garbage-transcript", _garbage_transcript, ".json", ["show", "report-html", "view", "audit"]),
    ("garbage-status", _garbage_status, "status.json", ["report-html"]),
]
for damage, make, expect, commands in RUN_DAMAGE:
    for command, build in _commands(make, commands):
        BAD.append(Case(f"rundir-{damage}-{command}", build, expect))


def _compare_two(ws: Workspace, *extra: str) -> list[str]:
    return ["compare", str(ws.run()), str(ws.run("other")), *extra]


table([
    ("show-unknown-qid", "QID", lambda ws: ["show", str(ws.run()), "nope"]),
    ("show-unknown-condition", "--condition", lambda ws: ["show", str(ws.run()), _qid(ws), "--condition", "c9"]),
    ("export-out-is-dir", "--out", lambda ws: ["export", str(ws.run()), "--out", str(ws.root)]),
    ("export-out-under-file", "--out",
     lambda ws: ["export", str(ws.run()), "--out", ws.text("afile", "x") + "/o.jsonl"]),
    ("compare-out-is-file", "--out", lambda ws: _compare_two(ws, "--out", ws.text("afile", "x"))),
    ("compare-pair-unknown", "--pair", lambda ws: _compare_two(ws, "--pair", "run/c0,nope/c9")),
    ("compare-pair-malformed", "--pair", lambda ws: _compare_two(ws, "--pair", "run/c0")),
    ("compare-condition-unknown", "c9", lambda ws: _compare_two(ws, "--condition", "c9")),
    ("compare-one-dir", "RUN_DIRS", lambda ws: ["compare", str(ws.run())]),
    ("compare-same-dir-twice", "RUN_DIRS", lambda ws: ["compare", str(ws.run()), str(ws.run())]),
    ("audit-provenance-missing", "--provenance",
     lambda ws: ["audit", str(ws.run()), "--provenance", str(ws.path("p.jsonl"))]),
    ("audit-provenance-latin1", "p.jsonl",
     lambda ws: ["audit", str(ws.run()), "--provenance", ws.bytes("p.jsonl", b'{"dataset": "\xe9"}\n')]),
    ("audit-provenance-dev-zero", "/dev/zero", lambda ws: ["audit", str(ws.run()), "--provenance", "/dev/zero"]),
    ("audit-provenance-malformed", "--provenance",
     lambda ws: ["audit", str(ws.run()), "--provenance", ws.text("p.jsonl", "{oops\n")]),
    ("runs-missing-dir", "RUNS_DIR", lambda ws: ["runs", str(ws.path("nope"))]),
    ("runs-is-file", "RUNS_DIR", lambda ws: ["runs", ws.text("afile", "x")]),
    ("runs-garbage-run-json", "run.json",
     lambda ws: [_garbage_run_json(ws), "runs", str(ws.root)][1:]),
    ("runs-run-json-missing-keys", "run.json",
     lambda ws: [_run_json(b'{"name": "x"}')(ws), "runs", str(ws.root)][1:]),
    ("corpus-ingest-missing", "m.jsonl", lambda ws: ["corpus", "ingest", str(ws.path("m.jsonl")), "--name", "x"]),
    ("corpus-ingest-latin1", "c.jsonl",
     lambda ws: ["corpus", "ingest", ws.bytes("c.jsonl", b'{"id": "1", "title": "t", "content": "caf\xe9"}\n'),
                 "--name", "x"]),
    ("corpus-ingest-bad-name", "name",
     lambda ws: ["corpus", "ingest", ws.text("c.jsonl", '{"id": "1", "title": "t", "content": "c"}\n'),
                 "--name", "../x"]),
    ("corpus-search-unknown", "nosuch", lambda ws: ["corpus", "search", "nosuch", "q"]),
    ("corpus-ingest-no-name", "--name", lambda ws: ["corpus", "ingest", ws.text("c.jsonl", "{}\n")]),
    ("corpus-ingest-binary", "c.bin", lambda ws: ["corpus", "ingest", ws.bytes("c.bin", bytes(range(256)) * 8),
                                                  "--name", "x"]),
    ("worker-sqlite-run", "SQLite", lambda ws: ["worker", str(ws.run())]),
    ("worker-sqlite-url", "RUN_DIR_OR_URL", lambda ws: ["worker", f"sqlite:///{ws.path('x.db')}"]),
    ("worker-unknown-dialect", "nosuch", lambda ws: ["worker", "nosuch://x"]),
    ("worker-postgres-refused", "127.0.0.1", lambda ws: ["worker", "postgresql://u@127.0.0.1:1/db"]),
])

# -- legal edge inputs: these must simply work ---------------------------------------------------

legal("validate-utf8-bom")(lambda ws: ["validate", ws.bytes("s.yaml", b"\xef\xbb\xbf" + GOOD.encode())])
legal("validate-crlf")(lambda ws: ["validate", ws.bytes("s.yaml", GOOD.replace("\n", "\r\n").encode())])
legal("validate-set-twice-later-wins")(lambda ws: ["validate", ws.scenario(), "--set", "run.workers=3",
                                                   "--set", "run.workers=2"])
legal("validate-flags-true-false")(lambda ws: ["validate", ws.scenario(GOOD.replace("[0, 1]", "[false, true]"))])
legal("validate-modest-anchors")(lambda ws: ["validate", ws.scenario(
    GOOD.replace("model: {backend: scripted}", "model: &m {backend: scripted}")
    + "budget_match: null\nsettings: &s {}\n")])
legal("validate-shipped-quickstart")(
    lambda ws: ["validate", str(Path(__file__).parents[1] / "scenarios" / "quickstart.yaml")])
legal("validate-compare-known")(lambda ws: ["validate", ws.scenario(GOOD + "compare: [[c0, c1]]\n")])
legal("validate-big-comment-under-cap")(lambda ws: ["validate", ws.scenario(GOOD + "#" + "x" * 200_000 + "\n")])
legal("run-overrides-in-range")(lambda ws: ["run", ws.scenario(), "--limit", "1", "--workers", "2", "--repeat", "2",
                                            "--max-calls", "1000", "--rpm", "60000", "--max-wall-s", "600",
                                            "--max-errors", "0", "--run-dir", str(ws.path("r")), "--quiet"])
legal("run-cost-limit-with-prices")(lambda ws: ["run", ws.scenario(), "--set", "run.prices={x: {input: 1, output: 2}}",
                                                "--max-cost-usd", "100", "--run-dir", str(ws.path("r")), "--quiet"])
legal("validate-base-url-https")(lambda ws: ["validate", ws.scenario(
    GOOD.replace("backend: scripted", "backend: scripted, base_url: 'https://h.example/v1'"))])
legal("resume-complete-run")(lambda ws: ["run", "--resume", str(ws.run()), "--workers", "2", "--quiet"])
legal("report")(lambda ws: ["report", str(ws.run())])
legal("show-with-condition")(lambda ws: ["show", str(ws.run()), _qid(ws), "--condition", "c0"])
legal("export-stdout")(lambda ws: ["export", str(ws.run()), "--out", "-"])
legal("export-existing-folder")(lambda ws: [ws.path("new/sub").mkdir(parents=True), "export", str(ws.run()),
                                            "--format", "csv", "--out", str(ws.path("new/sub/r.csv"))][1:])
legal("compare-two-runs")(lambda ws: _compare_two(ws, "--out", str(ws.path("cmp"))))
legal("audit")(lambda ws: ["audit", str(ws.run())])
legal("runs-empty-folder")(lambda ws: [ws.path("empty").mkdir(), "runs", str(ws.path("empty"))][1:])
legal("runs-with-runs")(lambda ws: [ws.run(), "runs", str(ws.root)][1:])
legal("help")(lambda ws: ["--help"])
legal("data-jsonl-unicode-blank-lines")(lambda ws: [
    ws.text("q.jsonl", "\n" + json.dumps({**QUESTION, "question": "Café – naïve? ✓"}, ensure_ascii=False) + "\n\n"),
    "validate", ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:])


# -- the probe -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("probe-base")
    (root / "s.yaml").write_text(GOOD, encoding="utf-8")
    res = invoke(["run", str(root / "s.yaml"), "--run-dir", str(root / "run"), "--quiet"])
    assert res.rc == 0, res.err + res.tb
    with sqlite3.connect(root / "run" / "study.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # copies then hold every page in study.db itself
    return root / "run"


@pytest.fixture
def ws(tmp_path: Path, base_run: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEDPANEL_PROBE_UNSET", raising=False)
    # `view` on a run it accepts would serve forever: the probe only needs what happens before.
    monkeypatch.setattr(ThreadingHTTPServer, "serve_forever", lambda self, *a, **k: None)
    return Workspace(tmp_path, base_run)


def shape_problem(res: Result) -> str | None:
    """Why a result is not 'one line on stderr, exit 2, no traceback' (None when it is)."""
    if res.tb or "Traceback" in res.err or "Traceback" in res.out:
        return f"traceback:\n{res.tb or res.err}"
    lines = [line for line in res.err.splitlines() if line.strip()]
    if res.rc != 2:
        return f"exit {res.rc}, stderr {res.err!r}, stdout tail {res.out[-300:]!r}"
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return f"stderr is not one 'error:' line: {res.err!r}"
    return None


@pytest.mark.parametrize("case", BAD, ids=[c.id for c in BAD])
def test_bad_input_is_one_line_exit_2(case: Case, ws: Workspace) -> None:
    argv = case.build(ws)
    started = time.perf_counter()
    res = invoke(argv)
    elapsed = time.perf_counter() - started
    problem = shape_problem(res)
    assert problem is None, f"{argv}: {problem}"
    if not SHAPE_ONLY:
        assert case.expect.lower() in res.err.lower(), f"{argv}: the line does not name {case.expect!r}: {res.err}"
        # Generous: a refusal does no real work, but a loaded machine can make even that slow.
        assert elapsed < 60, f"{argv} took {elapsed:.1f} s to refuse"


@pytest.mark.parametrize("build", [b for _, b in LEGAL], ids=[i for i, _ in LEGAL])
def test_legal_edge_input_finishes_cleanly(build: Build, ws: Workspace) -> None:
    argv = build(ws)
    res = invoke(argv)
    assert res.rc == 0 and not res.tb, f"{argv}: exit {res.rc}\n{res.err}{res.tb}"
    assert "Traceback" not in res.err


def test_probe_covers_every_command_and_input_kind() -> None:
    assert len(BAD) >= 90, len(BAD)
    assert len({c.id for c in BAD}) == len(BAD), "case ids repeat"
    ids = " ".join(c.id for c in BAD)
    for word in ("resume", "validate", "report", "view", "show", "compare", "export", "audit", "corpus",
                 "runs", "worker", "override", "yaml", "data", "rundir", "usage", "storage", "set"):
        assert word in ids, word


# -- the real console script, to show the in-process probe is faithful to it ------------------------

MEDPANEL = Path(sys.executable).parent / "medpanel"
CONSOLE_CASES = ["usage-limit-not-int", "usage-unknown-command", "override-workers-0", "rundir-garbage-run-json-report",
                 "yaml-latin1"]


@pytest.mark.parametrize("case_id", CONSOLE_CASES)
def test_console_script_gives_the_same_one_line(case_id: str, ws: Workspace) -> None:
    case = next(c for c in BAD if c.id == case_id)
    argv = case.build(ws)
    proc = subprocess.run([str(MEDPANEL), *argv], capture_output=True, text=True, timeout=120, cwd=ws.root,
                          env={**os.environ, "COLUMNS": "80"})
    res = Result(proc.returncode, proc.stdout, proc.stderr)
    problem = shape_problem(res)
    assert problem is None, f"{argv}: {problem}"
    assert invoke(argv).err == proc.stderr, "in-process main() and the console script disagree"
