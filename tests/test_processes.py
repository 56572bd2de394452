"""`run.processes`: several processes on one SQLite run directory, with real subprocesses and signals.

The fake endpoint runs in this test process and counts every request it answers; its replies are a
function of the request, so a 2-process run must send exactly the requests a 1-process run sends and
end with the same answers. Where a test needs both processes at work, the endpoint holds every
request until the study shows claims by two owners, so no figure depends on the machine's speed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.run.execution import processes, shares
from medpanel.experiments.run.execution.signals import BACKSTOP_S
from medpanel.experiments.run.tracking.budget import Budget
from medpanel.experiments.run.tracking.state import Stop

from .conftest import write
from .fake_openai import FakeOpenAI, completion, schema_reply
from .proc_helpers import alive, children_of
from .test_interrupts import ctrl_c_twice

SCENARIO = """name: procs
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample}}
model: {{backend: openai, name: fake-model, base_url: "{url}", cache: off}}
run: {{workers: 2, shard_size: 2, processes: {processes}, interrupt_grace_s: {grace}{extra}}}
"""
PAIRS = 24  # 2 conditions x the 12 sample questions
GRACE_S = 30.0
# The runner waits for its children no longer than this after a stop (then kills them).
STOP_BOUND_S = GRACE_S + BACKSTOP_S + processes.WAIT_MARGIN_S


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """A valid reply whose answer depends on the request (so answers differ between questions)."""
    reply = schema_reply(body)
    fmt = body.get("response_format") or {}
    schema = fmt.get("json_schema", {}).get("schema") or {}
    enum = schema.get("properties", {}).get("answer", {}).get("enum")
    if enum:
        reply["answer"] = enum[zlib.crc32(json.dumps(body["messages"]).encode()) % len(enum)]
    return reply


class Endpoint(FakeOpenAI):
    """Counts requests by their messages; with `hold_for`, answers nothing until that run's study has
    claims (executions) by two owners: both processes are then at work."""

    def __init__(self, latency_ms: float) -> None:
        self.hold_for: Path | None = None
        self.held = threading.Event()
        super().__init__(self._handle, latency_ms=latency_ms)

    def _handle(self, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        if self.hold_for is not None and not self.held.is_set():
            deadline = time.time() + 300
            while _owners(self.hold_for) < 2 and time.time() < deadline:
                time.sleep(0.05)
            self.held.set()
        return 200, {}, completion(json.dumps(_reply(body)))

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(json.dumps(b["messages"], sort_keys=True) for b in self.requests)


def _owners(run_dir: Path) -> int:
    try:
        with sqlite3.connect(run_dir / "study.db", timeout=10) as conn:
            return int(conn.execute("select count(distinct owner) from mp_executions").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def _scenario(tmp_path: Path, url: str, n: int, extra: str = "") -> Path:
    return write(tmp_path / f"s{n}.yaml", SCENARIO.format(url=url, processes=n, grace=GRACE_S, extra=extra))


def _env() -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": "sk-test"}


def _cli(*args: str) -> subprocess.Popen[str]:
    # Its own process group, as a terminal's foreground job: a group signal reaches it as Ctrl-C would.
    return subprocess.Popen([sys.executable, "-m", "medpanel", "run", "--quiet", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, env=_env())


def _query(run_dir: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(run_dir / "study.db", timeout=30) as conn:
        return list(conn.execute(sql))


def _answers(run_dir: Path) -> dict[tuple[str, str], tuple[str, bool]]:
    return {(c, q): (a, bool(k)) for c, q, a, k in _query(run_dir, "select condition, qid, answer, correct "
                                                                   "from mp_results")}


def _wait_for(cond: Any, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(0.05)


def _integrity(run_dir: Path) -> None:
    rows = _query(run_dir, "select condition, dataset, qid, repeat from mp_results")
    assert len(rows) == PAIRS == len(set(rows))
    assert _query(run_dir, "select count(*) from mp_claims")[0][0] == 0
    assert _query(run_dir, "PRAGMA integrity_check")[0][0] == "ok"


def test_two_processes_execute_every_pair_once_and_answer_as_one_does(tmp_path: Path) -> None:
    with Endpoint(latency_ms=20) as one:
        proc = _cli(str(_scenario(tmp_path, one.base_url, 1)), "--run-dir", str(tmp_path / "one"))
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
        single = one.counts()
    with Endpoint(latency_ms=20) as two:
        two.hold_for = tmp_path / "two"
        proc = _cli(str(_scenario(tmp_path, two.base_url, 2)), "--run-dir", str(tmp_path / "two"))
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out
        double = two.counts()
    run_dir = tmp_path / "two"
    _integrity(run_dir)
    # Both processes claimed and committed pairs; every pair started once.
    assert len({w for (w,) in _query(run_dir, "select distinct worker from mp_results")}) == 2
    executions = _query(run_dir, "select condition, dataset, qid, repeat from mp_executions")
    assert len(executions) == len(set(executions)) == PAIRS
    # The endpoint saw each request exactly as often as for one process: nothing executed twice.
    assert double == single and sum(double.values()) > PAIRS
    assert _answers(run_dir) == _answers(tmp_path / "one")
    assert len({a for a, _ in _answers(run_dir).values()}) > 1  # answers differ: the comparison means something
    meta = json.loads((run_dir / "run.json").read_text())
    status = json.loads((run_dir / "status.json").read_text())
    assert meta["scenario"]["run"]["processes"] == 2 and status["processes"] == 2
    assert status["state"] == "complete"


def test_ctrl_c_to_the_runner_stops_every_process_and_a_resume_finishes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Endpoint(latency_ms=300) as endpoint:
        endpoint.hold_for = run_dir
        proc = _cli(str(_scenario(tmp_path, endpoint.base_url, 2)), "--run-dir", str(run_dir))
        _wait_for(lambda: _owners(run_dir) >= 2)
        children = children_of(proc.pid)
        assert len(children) == 1, children  # run.processes 2: the runner and one child
        _wait_for(endpoint.held.is_set)
        began = time.time()
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends Ctrl-C to its foreground job
        out, _ = proc.communicate(timeout=STOP_BOUND_S + 60)
        assert proc.returncode == 3, out
        # The runner waits for its children (killing any still there after the bound): none is left.
        assert not [c for c in children if alive(c)]
        assert time.time() - began < STOP_BOUND_S + 60
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "stopped" and status["reason"].startswith("interrupted (Ctrl-C)")
        # Every question either process had started was finished and saved (the first Ctrl-C drains).
        started = _query(run_dir, "select count(*) from mp_executions")[0][0]
        assert started == _query(run_dir, "select count(*) from mp_results")[0][0] < PAIRS
        assert _query(run_dir, "select count(*) from mp_claims")[0][0] == 0
        resumed = _cli("--resume", str(run_dir))
        out, _ = resumed.communicate(timeout=600)
        assert resumed.returncode == 0, out
    _integrity(run_dir)
    executions = _query(run_dir, "select condition, dataset, qid, repeat from mp_executions")
    assert len(executions) == len(set(executions)) == PAIRS  # nothing lost, nothing run twice


def test_a_second_ctrl_c_aborts_every_process_at_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # 60 s calls: neither Ctrl-C can be answered by the questions finishing; the abort is timed.
    with Endpoint(latency_ms=60000) as endpoint:
        proc = _cli(str(_scenario(tmp_path, endpoint.base_url, 2)), "--run-dir", str(run_dir))
        _wait_for(lambda: _owners(run_dir) >= 2)  # both processes have questions at their first call
        children = children_of(proc.pid)
        assert len(children) == 1, children
        out, began = ctrl_c_twice(proc, lambda: os.killpg(proc.pid, signal.SIGINT), timeout=60, processes=2)
        assert proc.returncode == 130, out
        assert time.time() - began < 30, "the second Ctrl-C waited for the questions in flight"
        _wait_for(lambda: not [c for c in children if alive(c)], timeout=30)
    assert _query(run_dir, "select count(*) from mp_results")[0][0] == 0


def test_a_killed_child_does_not_hang_the_runner_and_its_questions_are_redone(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Endpoint(latency_ms=300) as endpoint:
        endpoint.hold_for = run_dir
        proc = _cli(str(_scenario(tmp_path, endpoint.base_url, 2)), "--run-dir", str(run_dir))
        _wait_for(lambda: _owners(run_dir) >= 2)
        (child,) = children_of(proc.pid)
        os.kill(child, signal.SIGKILL)  # its claims in flight stay behind in the study
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out
        assert "ended (signal SIGKILL) before it finished" in out
    _integrity(run_dir)
    done = _query(run_dir, "select condition, dataset, qid, repeat from mp_results")
    executions = Counter(_query(run_dir, "select condition, dataset, qid, repeat from mp_executions"))
    assert set(executions) == set(done)
    # Only the pairs the child held when it died ran twice: at most its two workers' questions.
    assert sum(executions.values()) - PAIRS <= 2


def test_a_member_joins_only_the_run_its_runner_is_running(tmp_path: Path) -> None:
    with Endpoint(latency_ms=0) as endpoint:
        proc = _cli(str(_scenario(tmp_path, endpoint.base_url, 1)), "--run-dir", str(tmp_path / "run"))
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    spec = processes.MemberSpec(runner_pid=os.getpid(), owner="x/p1", index=1, processes=2, study="medpanel",
                                grid=[0], run={})
    member = subprocess.run([sys.executable, "-m", "medpanel.experiments.run.execution.member", str(tmp_path / "run")],
                            input=spec.model_dump_json() + "\n", capture_output=True, text=True, timeout=120,
                            env=_env())
    assert member.returncode == 2, member.stdout + member.stderr
    assert f"is not being run by process {os.getpid()}" in member.stderr and "Traceback" not in member.stderr


# -- the shares ----------------------------------------------------------------------------------


def test_integer_shares_add_up_to_the_whole_and_differ_by_at_most_one() -> None:
    for total in (0, 1, 7, 10, 101):
        for n in (1, 2, 3, 4):
            parts = [shares.split(total, n, i) for i in range(n)]
            assert sum(parts) == total and max(parts) - min(parts) <= 1
    assert [shares.split(10, 3, i) for i in range(3)] == [4, 3, 3]


def test_each_process_gets_its_share_of_the_rates_and_of_what_is_left_of_the_budgets() -> None:
    assert shares.rate(600.0, 4) == 150.0 and shares.rate(None, 4) is None
    totals = [0, 0]
    for i in range(2):
        b = Budget(stop=Stop(), max_calls=101, max_tokens=None, max_cost_usd=2.0)
        b.add_prior(41, 0, 0.5)  # earlier sessions spent these
        errors = shares.take(b, [], 10, 4, 2, i, counts_prior=i == 0)
        assert b.max_tokens is None and b.max_cost_usd == 0.5 + 0.75
        totals[0] += b.max_calls - 41 if b.max_calls is not None else 0
        # The runner's tally holds the 4 earlier error rows, a child's only its own.
        assert errors == (4 + 3 if i == 0 else 3)
    assert totals[0] == 60  # the 60 calls left, divided: 30 + 30


def test_the_rate_limits_of_each_process_are_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    scenario = _scenario(tmp_path, "http://127.0.0.1:9/v1", 3, extra=", requests_per_minute: 600, "
                         "tokens_per_minute: 90000")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    runner = Runner.create(make_plan(load_scenario(scenario), base_dir=tmp_path), run_dir=tmp_path / "run")
    limiter = runner.budget.limiter
    assert limiter is not None and (limiter.rpm, limiter.tpm) == (200.0, 30000.0)
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["scenario"]["run"]["processes"] == 3
    assert meta["scenario"]["run"]["requests_per_minute"] == 600  # the run's limit, as given


def test_children_started_ahead_are_taken_by_the_session_and_the_rest_exit_when_discarded() -> None:
    from medpanel.experiments.run.execution import children

    children.prestart(2)
    try:
        taken = children.take(1)  # the session needed one: the other is ended
        assert len(taken) == 1 and taken[0].poll() is None
    finally:
        children.discard()
    assert children.take(5) == []  # nothing is left ahead
    for proc in taken:
        assert proc.stdin is not None
        proc.stdin.close()  # no part for it: it exits without working
        assert proc.wait(timeout=120) == 0


def test_a_signal_landing_while_the_handlers_forward_holds_the_lock_is_forwarded_too(tmp_path: Path) -> None:
    # The signal handler forwards each Ctrl-C to the children under the group's lock, on the main
    # thread; a second Ctrl-C can interrupt the first one's forward while it holds that lock. The
    # nested forward must go through (a plain Lock waited for itself: the runner hung, abort lost).
    group = processes.Group(tmp_path, Stop(), store=None, grace_s=1, backstop_s=1)  # type: ignore[arg-type]
    done = threading.Event()

    def first_forward_interrupted() -> None:
        with group.lock:  # the first Ctrl-C's forward, interrupted here
            group.forward(signal.SIGINT, 2)  # the second Ctrl-C's handler, on the same thread
            done.set()

    t = threading.Thread(target=first_forward_interrupted, daemon=True)
    t.start()
    assert done.wait(10), "the nested forward waited for the lock its own thread holds"
    assert group.signals_sent == 2


def test_the_runner_is_done_waiting_when_its_last_child_exits_not_at_its_next_look(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its looks are WATCH_S apart: a wait in fixed steps would end up to one step after the exit.
    monkeypatch.setattr(processes, "WATCH_S", 120.0)
    group = processes.Group(tmp_path, Stop(), store=None, grace_s=1, backstop_s=1)  # type: ignore[arg-type]
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    group.children.append(processes._Child(proc, ""))
    started = time.monotonic()
    group.wait()  # closes the child's stdin: it exits
    assert proc.returncode == 0
    assert time.monotonic() - started < 60, "the runner waited out its step after the child had gone"
