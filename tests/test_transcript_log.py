"""Transcripts go to one append-only log per worker, not a new file per question: written whole
before the row, read by every reader through the row's byte range, a torn tail left out, never a
file shared by two workers; old runs (a file per question) still read."""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store import confined, transcript_log
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import (
    RecordPath,
    TranscriptLog,
    count_records,
    log_files,
    parse_reference,
    record_path,
    records_in,
)

from .cli_helpers import output_of as cli


def _scenario(tmp_path: Path, n: int, **run: object) -> Scenario:
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"realidx": f"q{i}", "question": f"Question {i}?", "answer_idx": "A",
                                        "options": {"A": "a", "B": "b"}}) + "\n" for i in range(n)))
    return Scenario.model_validate({"name": "tl", "pipeline": "generalist", "flags": {"c": [0, 1]},
                                    "dataset": {"source": "jsonl", "path": str(data)},
                                    "model": {"backend": "scripted", "cache": "off"},
                                    "run": {"workers": 2, **run}})


def _run(tmp_path: Path, n: int = 12) -> Path:
    runner = Runner.create(make_plan(_scenario(tmp_path, n), base_dir=tmp_path), run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner.run_dir


def _rows(run_dir: Path) -> list:  # type: ignore[type-arg]
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    try:
        return store.rows()
    finally:
        store.close()


def _own_record(run_dir: Path, row) -> dict:  # type: ignore[no-untyped-def, type-arg]
    doc = json.loads(record_path(run_dir, row.transcript).read_bytes())
    assert (doc["condition"], doc["question"]["qid"], doc["repeat"]) == (row.condition, row.qid, row.repeat)
    return doc


def test_a_run_creates_one_log_per_worker_not_a_file_per_question(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    real = confined.new_temporary

    def counted(folder: Path, name: str, *args: object) -> int:
        if "transcripts" in str(folder):
            created.append(name)
        return real(folder, name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(confined, "new_temporary", counted)
    run_dir = _run(tmp_path, 20)
    rows = _rows(run_dir)
    assert len(rows) == 40
    # 40 questions finished by one process: one file made for their transcripts, not 40.
    assert len(created) == 1, created
    assert not list((run_dir / "transcripts").rglob("*.json")), "a file per question was written"
    assert [p.name for p in log_files(run_dir)] == [Path(created[0]).name]
    refs = [r.transcript for r in rows]
    assert all(parse_reference(ref) for ref in refs) and len(set(refs)) == len(refs)
    for r in rows:
        _own_record(run_dir, r)
    assert count_records(run_dir) == 40


def test_every_reader_reads_the_new_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medpanel import api
    from medpanel.experiments.run.store.rundir import load_run

    run_dir = _run(tmp_path, 3)
    rows = _rows(run_dir)
    data = load_run(run_dir)
    assert all(data.transcript(r) is not None for r in data.rows)
    run = api.load_run(run_dir)
    assert sorted(t.question.qid for t in run.transcripts()) == sorted(r.qid for r in run.rows)
    assert len(run.calls()) == sum(r.calls for r in rows)
    monkeypatch.chdir(tmp_path)
    shown = cli("show", str(run_dir), "q1")
    assert "tl/q1" in shown or "q1" in shown
    assert "is missing" not in shown
    table = cli("report", str(run_dir))
    assert "c0" in table and "c1" in table
    cli("report", str(run_dir), "--html")
    pages = list((run_dir / "report" / "questions").glob("*.html"))
    assert len(pages) == 3
    assert not [p for p in pages if "transcript missing" in p.read_text(encoding="utf-8").lower()]
    out = tmp_path / "inspect"
    cli("export", str(run_dir), "--format", "inspect", "--out", str(out))
    logs = sorted(out.iterdir())
    assert logs
    from inspect_ai.log import read_eval_log

    samples = [s for p in logs for s in (read_eval_log(str(p)).samples or [])]
    assert len(samples) == len(rows) and all(s.messages for s in samples)


def test_a_torn_final_line_is_no_record_and_no_error(tmp_path: Path) -> None:
    log = TranscriptLog(Confined(tmp_path))
    refs = [log.append(json.dumps({"n": n})) for n in range(3)]
    log.close()
    path = tmp_path / log.name
    with open(path, "ab") as fh:
        fh.write(b'{"n": 3, "half of a rec')  # a process killed mid-write
    assert [json.loads(line)["n"] for _, line in records_in(path)] == [0, 1, 2]
    assert count_records(tmp_path) == 3
    torn = RecordPath.of(path, path.stat().st_size - 23, 30)
    assert not torn.is_file()
    assert [json.loads(record_path(tmp_path, r).read_bytes())["n"] for r in refs] == [0, 1, 2]


def test_a_failed_write_is_cut_off_so_the_next_record_follows_a_whole_one(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    log = TranscriptLog(Confined(tmp_path))
    log.append('{"n":0}')
    real = os.write

    def full(fd: int, data: bytes) -> int:
        real(fd, bytes(data)[:3])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(transcript_log.os, "write", full)
    with pytest.raises(OSError):
        log.append('{"n":1}')
    monkeypatch.setattr(transcript_log.os, "write", real)
    ref = log.append('{"n":2}')
    log.close()
    assert [json.loads(line)["n"] for _, line in records_in(tmp_path / log.name)] == [0, 2]
    assert json.loads(record_path(tmp_path, ref).read_bytes()) == {"n": 2}


def test_two_workers_never_share_a_file(tmp_path: Path) -> None:
    folder = Confined(tmp_path)
    a, b = TranscriptLog(folder), TranscriptLog(folder)
    a.append("{}")
    b.append("{}")
    assert a.name != b.name
    assert f"-{os.getpid()}-" in a.name
    # A forked child appending through its parent's log gets a file of its own.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, a.append('{"child":1}').encode())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    os.close(write)
    child_ref = os.read(read, 4096).decode()
    os.close(read)
    assert parse_reference(child_ref)[0] not in (a.name, b.name)  # type: ignore[index]
    assert parse_reference(a.append('{"parent":1}'))[0] == a.name  # type: ignore[index]
    assert json.loads(record_path(tmp_path, child_ref).read_bytes()) == {"child": 1}
    a.close()
    b.close()
    assert len(log_files(tmp_path)) == 3


def test_a_log_is_never_opened_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "transcripts").symlink_to(outside, target_is_directory=True)
    with pytest.raises(confined.UnsafePath):
        TranscriptLog(Confined(run_dir)).append("{}")
    assert not list(outside.iterdir())


def test_a_retried_question_reads_its_own_record_never_the_errors(tmp_path: Path) -> None:
    from medpanel.agents.types import Question, QuestionResult

    store = Store(f"sqlite:///{tmp_path / 'study.db'}", tmp_path)
    q = Question(dataset="d", qid="a", text="t?", options={"A": "x", "B": "y"}, gold=("A",))
    base = {"condition": "c0", "dataset": "d", "qid": "a", "gold": ("A",)}
    store.commit(QuestionResult(**base, error="http_400: no", error_kind="http_400"), q, "me")
    error_ref = store.rows()[0].transcript
    store.commit(QuestionResult(**base, answer=("B",)), q, "me", replace_error=True)
    rows = store.rows()
    store.close()
    assert len(rows) == 1 and rows[0].transcript != error_ref
    doc = _own_record(tmp_path, rows[0])
    assert doc["answer"] == ["B"] and doc["error"] is None
    assert json.loads(record_path(tmp_path, error_ref).read_bytes())["error"]  # still in the log, unnamed


def test_shared_storage_copies_other_machines_logs_record_by_record(tmp_path: Path) -> None:
    from medpanel.agents.types import Question, QuestionResult

    store = Store(f"sqlite:///{tmp_path / 'study.db'}", tmp_path)
    store.shared = True
    q = Question(dataset="d", qid="a", text="t?", options={"A": "x", "B": "y"}, gold=("A",))
    for qid in ("a", "b", "c"):
        store.commit(QuestionResult(condition="c0", dataset="d", qid=qid, gold=("A",), answer=("A",), correct=True),
                     q.model_copy(update={"qid": qid}), "me")
    rows = store.rows()
    name = store.log.name
    store.close()
    reader = Store(f"sqlite:///{tmp_path / 'study.db'}", tmp_path)
    reader.shared = True
    assert reader.sync_transcripts() == 0  # the log holds them all: left alone
    (tmp_path / name).unlink()  # written on another machine: not in this folder
    assert reader.sync_transcripts() == 3
    for r in rows:
        _own_record(tmp_path, r)
    assert reader.sync_transcripts() == 0
    reader.close()


CHILD = """
import os, signal, sys
from pathlib import Path
from medpanel.experiments.run.store import transcript_log
from medpanel.experiments.run.execution.runner import Runner

class Killing:
    # The process's os, but the sixth transcript write sends half its bytes and the process is killed.
    writes = 0
    def __getattr__(self, name):
        return getattr(os, name)
    def write(self, fd, data):
        Killing.writes += 1
        if Killing.writes == 6:
            os.write(fd, bytes(data)[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return os.write(fd, data)

transcript_log.os = Killing()
Runner.open(Path(sys.argv[1])).run(install_signals=False)
"""


def test_sigkill_mid_write_then_resume_gives_every_question_its_whole_record(tmp_path: Path) -> None:
    runner = Runner.create(make_plan(_scenario(tmp_path, 10, workers=1), base_dir=tmp_path), run_dir=tmp_path / "run")
    run_dir = runner.run_dir
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    done = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    [log] = log_files(run_dir)
    whole = list(records_in(log))
    assert len(whole) == 5 and not log.read_bytes().endswith(b"\n")  # five records and half of the sixth
    with sqlite3.connect(run_dir / "study.db") as conn:
        committed = conn.execute("select count(*) from mp_results").fetchone()[0]
    assert committed <= 5
    assert Runner.open(run_dir).run(install_signals=False)["state"] == "complete"
    rows = _rows(run_dir)
    assert len(rows) == 20 and len({r.transcript for r in rows}) == 20
    for r in rows:
        _own_record(run_dir, r)
    assert len(log_files(run_dir)) == 2  # the killed process's log and the resume's own
    assert list(records_in(log)) == whole  # the torn tail is still no record
    cli("report", str(run_dir))
