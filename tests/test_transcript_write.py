"""Transcripts are written whole or not at all (a line appended to the worker's log before the row;
files through the run directory's writer: a temporary name, then rename), without an fsync per
question: the row's commit does not fsync either (SQLite `synchronous=NORMAL`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store import confined
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import record_path


def _run(tmp_path: Path, n: int = 12) -> Path:
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"realidx": f"q{i}", "question": f"Question {i}?", "answer_idx": "A",
                                        "options": {"A": "a", "B": "b"}}) + "\n" for i in range(n)))
    scenario = Scenario.model_validate({"name": "tw", "pipeline": "direct",
                                        "dataset": {"source": "jsonl", "path": str(data)},
                                        "model": {"backend": "scripted", "cache": "off"}, "run": {"workers": 2}})
    runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner.run_dir


def test_a_run_fsyncs_no_transcript_and_every_row_has_its_whole_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(confined.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    run_dir = _run(tmp_path)
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    rows = store.rows()
    store.close()
    assert len(rows) == 12
    for r in rows:
        doc = json.loads(record_path(run_dir, r.transcript).read_text(encoding="utf-8"))
        assert doc["question"]["qid"] == r.qid
    transcripts = list((run_dir / "transcripts").rglob("*"))
    assert not [p for p in transcripts if p.name.endswith(".tmp")], "a temporary file was left behind"
    # run.json, questions.jsonl and status files still go through the durable path; transcripts do not.
    assert len(synced) < len(rows), f"{len(synced)} fsyncs for {len(rows)} transcripts"


def test_a_failed_write_leaves_the_previous_file_whole_and_no_temporary(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t" / "x.json"
    Confined(tmp_path).write("t/x.json", '{"v": 1}', durable=False)
    assert json.loads(path.read_text()) == {"v": 1}

    def broken(src: str, dst: str, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(confined.os, "replace", broken)
    with pytest.raises(OSError, match="No space left") as info:
        Confined(tmp_path).write("t/x.json", '{"v": 2, "long": "' + "x" * 10_000 + '"}', durable=False)
    assert str(path) in str(info.value), "the error names the file meant, not its temporary sibling"
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_the_durable_write_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(confined.os, "fsync", synced.append)
    Confined(tmp_path).write("run.json", "{}")
    Confined(tmp_path).write("t.json", "{}", durable=False)
    assert len(synced) == 1
