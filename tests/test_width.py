"""Width: hundreds of questions in flight in one process, every record intact."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import record_path

from .fake_openai import FakeOpenAI, completion, schema_reply

LETTERS = "ABCD"


def _expected(i: int) -> str:
    return LETTERS[(i * 7 + 3) % 4]


GATE_TIMEOUT_S = 300.0
"""How long the gate holds requests before giving up on the width arriving: far longer than 256
requests take to be sent even on a loaded machine, so only a runner that does not keep them all in
flight at once meets it."""


class _Gate:
    """A handler that holds every request until `width` of them have arrived, then answers them all,
    each with a letter derived from its own question number (so a reply landing in another
    question's record shows). Only a runner that keeps `width` requests in flight at once opens it;
    how fast the machine sends them does not matter."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.cond = threading.Condition()
        self.arrived = 0
        self.opened = False
        self.timed_out = False

    def __call__(self, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        with self.cond:
            self.arrived += 1
            if self.arrived >= self.width:
                self.opened = True
                self.cond.notify_all()
            elif not self.cond.wait_for(lambda: self.opened, timeout=GATE_TIMEOUT_S):
                self.timed_out = True
        text = json.dumps(body["messages"])
        i = int(re.search(r"Width question (\d+)\?", text).group(1))  # type: ignore[union-attr]
        reply = schema_reply(body) | {"answer": _expected(i)}
        return 200, {}, completion(json.dumps(reply))


def _dataset(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"realidx": f"w{i}", "question": f"Width question {i}?",
                                        "options": {k: k.lower() for k in LETTERS}, "answer_idx": "A"}) + "\n"
                            for i in range(n)))
    return path


def _run(tmp_path: Path, base_url: str, n: int, workers: int, per_worker: int, **run: Any) -> Runner:
    scenario = Scenario.model_validate({
        "name": "width", "pipeline": "generalist", "flags": {"c": [0]},
        "dataset": {"source": "jsonl", "path": str(_dataset(tmp_path / "q.jsonl", n))},
        "model": {"backend": "openai", "name": "fake-model", "base_url": base_url, "cache": "off"},
        "run": {"workers": workers, "questions_per_worker": per_worker, **run},
    })
    plan = make_plan(scenario, base_dir=tmp_path)
    return Runner.create(plan, run_dir=tmp_path / "run")


def test_256_in_flight_every_record_intact(tmp_path: Path) -> None:
    # 4 workers x 64 questions: the gate opens only when all 256 requests are held at once.
    gate = _Gate(256)
    with FakeOpenAI(gate) as srv:
        runner = _run(tmp_path, srv.base_url, 256, 4, 64, per_call_timeout_s=GATE_TIMEOUT_S + 60)
        status = runner.run(install_signals=False)
    assert status["state"] == "complete", status
    assert gate.opened and not gate.timed_out, f"only {gate.arrived} requests were in flight before the gate gave up"
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    executions = Counter(store.executions())
    store.close()
    assert len(rows) == 256 and not any(r.error for r in rows)
    assert max(executions.values()) == 1, "a pair ran twice"
    for row in rows:
        i = int(row.qid.removeprefix("w"))
        assert row.answer == _expected(i), f"{row.qid} holds another question's reply"
        doc = json.loads(record_path(runner.run_dir, row.transcript).read_text())
        assert doc["question"]["qid"] == row.qid
        assert f"Width question {i}?" in json.dumps(doc["events"])
        assert sum(1 for e in doc["events"] if e["kind"] == "call") == 1


@pytest.mark.parametrize("busy", ["claims", "commits", "both"])
def test_with_the_write_lock_always_taken_elsewhere_claims_and_commits_wait_in_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, busy: str) -> None:
    """A lane claims and commits on its loop's own SQLite connection unless another connection is
    writing; then it waits in a thread. With the lock always taken (as the loop's attempts see it),
    every pair still runs once and is recorded once."""
    if busy in ("claims", "both"):
        monkeypatch.setattr(Store, "claim_now", lambda self, *a, **k: None)
    if busy in ("commits", "both"):
        monkeypatch.setattr(Store, "record_now", lambda self, staged: None)
        monkeypatch.setattr(Store, "record_and_claim_now", lambda self, *a, **k: None)
    with FakeOpenAI(_Gate(1)) as srv:
        runner = _run(tmp_path, srv.base_url, 30, 2, 6)
        status = runner.run(install_signals=False)
    assert status["state"] == "complete", status
    store = Store(runner.storage_url, runner.run_dir)
    rows, executions = store.rows(), Counter(store.executions())
    with store.engine.connect() as conn:
        claims = conn.exec_driver_sql("select count(*) from mp_claims").scalar_one()
    store.close()
    assert len(rows) == 30 and sorted(executions.values()) == [1] * 30 and claims == 0
    assert runner.tally.done == 30


def test_a_failing_lane_stops_its_siblings_and_releases_claims(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One question's commit raising (not a storage failure) ends the worker: its sibling lanes start
    nothing new, what they had in flight is committed, and no claim is left behind."""
    with FakeOpenAI(_Gate(1), latency_ms=50) as srv:
        runner = _run(tmp_path, srv.base_url, 40, 1, 8, shard_size=40)  # one trial: no other to go on
        real = Store.stage  # where every commit starts (the transcript, then the row)
        seen: list[str] = []

        def stage(self: Store, result: Any, question: Any, owner: str, *a: Any, **k: Any) -> Any:
            seen.append(question.qid)
            if len(seen) == 3:
                raise RuntimeError("a bug in a commit")
            return real(self, result, question, owner, *a, **k)

        monkeypatch.setattr(Store, "stage", stage)
        status = runner.run(install_signals=False)
    assert status["state"] == "incomplete"
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    with store.engine.connect() as conn:
        claims = conn.exec_driver_sql("select count(*) from mp_claims").scalar_one()
    store.close()
    # The lanes stop at their next question: about 3 + 8 of the 40 ran, each committed but the one
    # that raised; the failing lane's next question (already run) was released, not committed.
    assert len(seen) <= 20 and len(rows) == len(seen) - 1
    assert claims == 0


def test_questions_per_worker_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        from medpanel.experiments.run.scenario.runspec import RunSpec, updated

        updated(RunSpec(), {"questions_per_worker": 0}, block="run")
    assert "questions_per_worker" in str(err.value) or "run" in str(err.value)


def _render(progress: Any) -> str:
    from rich.console import Console

    console = Console(width=400, record=True, color_system=None)
    console.print(progress.make_tasks_table(progress.tasks))
    return console.export_text()


def test_progress_shows_calls_per_second_tokens_per_minute_and_eta() -> None:
    from rich.console import Console

    from medpanel.experiments.cli.progress import make_progress, progress_hook
    from medpanel.experiments.run.tracking.state import Tally

    now = [1000.0]
    progress = make_progress(Console(width=400, color_system=None), quiet=True)
    hook = progress_hook(progress, 100, priced=False, tpm_limit=None, clock=lambda: now[0])
    # A resumed run: 10 pairs, 50 calls, 5,000 tokens from earlier sessions count in neither rate.
    hook(Tally(done=10, calls=50, tokens=5000), 100)
    assert "ETA -:--:--" in _render(progress)
    now[0] += 30
    hook(Tally(done=40, calls=110, tokens=8000), 100)
    text = _render(progress)
    # 60 calls in 30 s = 2.0 calls/s; 3,000 tokens in half a minute = 6,000 tok/min; 30 pairs in 30 s,
    # 60 left -> 60 s.
    assert "2.0 calls/s" in text and "6,000 tok/min (no limit)" in text and "ETA 0:01:00" in text, text
    assert "40/100" in text

    limited = make_progress(Console(width=400, color_system=None), quiet=True)
    hook = progress_hook(limited, 100, priced=False, tpm_limit=90000, clock=lambda: now[0])
    hook(Tally(done=0, calls=0, tokens=0), 100)
    now[0] += 120  # older samples leave the 60 s window: the rate is the last minute's
    hook(Tally(done=1, calls=10, tokens=1000), 100)
    now[0] += 60
    hook(Tally(done=2, calls=70, tokens=31000), 100)
    text = _render(limited)
    assert "1.0 calls/s" in text and "30,000 tok/min / 90,000" in text, text


def test_a_budget_halts_many_lanes_and_resume_finishes_the_rest(tmp_path: Path) -> None:
    with FakeOpenAI(_Gate(1), latency_ms=100) as srv:
        runner = _run(tmp_path, srv.base_url, 60, 2, 8, max_calls=20)
        first = runner.run(install_signals=False)
        assert first["state"] == "stopped" and "max_calls" in (first["reason"] or ""), first
        store = Store(runner.storage_url, runner.run_dir)
        halted = len(store.rows())
        store.close()
        assert 0 < halted < 60
        again = Runner.open(runner.run_dir)
        again.override(max_calls=1000)
        second = again.run(install_signals=False)
    assert second["state"] == "complete", second
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    with store.engine.connect() as conn:
        claims = conn.exec_driver_sql("select count(*) from mp_claims").scalar_one()
    store.close()
    assert sorted(r.qid for r in rows) == sorted(f"w{i}" for i in range(60)) and claims == 0
    assert all(r.answer == _expected(int(r.qid[1:])) for r in rows)


def test_redaction_cache_sees_a_secret_set_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """`redact` caches the secrets it found (a millisecond a commit); a key set afterwards still counts."""
    from medpanel.agents.redact import MASK, redact

    secret = "zq-width-cache-secret-0123456789"
    assert redact(f"echo {secret}") == f"echo {secret}"
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    assert redact(f"echo {secret}") == f"echo {MASK}"
    monkeypatch.delenv("MY_SERVICE_TOKEN")
    assert redact(f"echo {secret}") == f"echo {secret}"
