"""On SQLite a lane's finished row and its next claim are one transaction (one begin and one commit
a question instead of two): both are in or neither is, whatever kills the process, and a run's
questions still go once each, with no claim left behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store import sqlite_writes
from medpanel.experiments.run.store.store import Staged, Store

FIRST, NEXT = ("c0", "medqa", "q1", 0), ("c0", "medqa", "q2", 0)


def _store(path: Path) -> Store:
    return Store(f"sqlite:///{path / 'study.db'}", path)


def _staged(store: Store, qid: str = "q1", owner: str = "a") -> Staged:
    question = Question(dataset="medqa", qid=qid, text="Which?", options={"A": "a", "B": "b"}, gold=("A",))
    result = QuestionResult(condition="c0", dataset="medqa", qid=qid, answer=("A",), gold=("A",), correct=True)
    return store.stage(result, question, owner)


def _state(store: Store) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """(rows' qids, claims as (qid, owner), executions' qids)."""
    with store.engine.connect() as conn:
        rows = [r[0] for r in conn.execute(sa.text("select qid from mp_results order by qid"))]
        claims = [(r[0], r[1]) for r in conn.execute(sa.text("select qid, owner from mp_claims order by qid"))]
        runs = [r[0] for r in conn.execute(sa.text("select qid from mp_executions order by qid"))]
    return rows, claims, runs


def test_the_row_goes_in_its_claim_out_and_the_next_pair_is_claimed_together(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.claim(FIRST, "a")
    done = store.record_and_claim_now(_staged(store), NEXT, "a")
    assert done is not None
    row, taken = done
    assert row.qid == "q1" and taken is True
    assert _state(store) == (["q1"], [("q2", "a")], ["q1", "q2"])
    store.close()


def test_a_next_pair_someone_else_holds_is_not_taken_and_the_row_still_goes_in(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.claim(FIRST, "a") and store.claim(NEXT, "b")
    done = store.record_and_claim_now(_staged(store), NEXT, "a")
    assert done is not None and done[1] is False
    assert _state(store) == (["q1"], [("q2", "b")], ["q1", "q2"])
    store.close()


def test_a_failing_claim_leaves_the_row_out_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    assert store.claim(FIRST, "a")
    staged = _staged(store)

    def broken(*args: object) -> bool:
        raise OSError("disk gone")

    monkeypatch.setattr(Store, "_take", staticmethod(broken))
    with pytest.raises(OSError, match="disk gone"):
        store.record_and_claim_now(staged, NEXT, "a")
    assert _state(store) == ([], [("q1", "a")], ["q1"])  # as before the transaction
    store.close()


KILLED = """
import os, signal, sys
from pathlib import Path
from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.run.store.store import Store

folder, when = Path(sys.argv[1]), sys.argv[2]
store = Store(f"sqlite:///{folder / 'study.db'}", folder)
assert store.claim(("c0", "medqa", "q1", 0), "dead")
question = Question(dataset="medqa", qid="q1", text="Which?", options={"A": "a", "B": "b"}, gold=("A",))
result = QuestionResult(condition="c0", dataset="medqa", qid="q1", answer=("A",), gold=("A",), correct=True)
staged = store.stage(result, question, "dead")
if when == "between":
    # The row is inserted and its claim dropped; the process dies before the next claim's statement.
    Store._take = staticmethod(lambda *a: os.kill(os.getpid(), signal.SIGKILL))
store.record_and_claim_now(staged, ("c0", "medqa", "q2", 0), "dead")
os.kill(os.getpid(), signal.SIGKILL)  # "after": the transaction is committed
"""


@pytest.mark.parametrize("when", ["between", "after"])
def test_a_kill_leaves_both_or_neither_and_a_resume_runs_the_pair_again(tmp_path: Path, when: str) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(KILLED))
    done = subprocess.run([sys.executable, str(script), str(tmp_path), when], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    store = _store(tmp_path)
    if when == "between":
        assert _state(store) == ([], [("q1", "dead")], ["q1"])  # no row, no next claim: the claim it had
    else:
        assert _state(store) == (["q1"], [("q2", "dead")], ["q1", "q2"])
    # A resume on this machine frees a dead owner's claims, then whatever has no row runs again.
    store.release_stale_claims(live_owners=["resume"])
    assert _state(store)[1] == []
    assert store.claim(FIRST, "resume") is (when == "between")
    assert store.claim(NEXT, "resume") is True
    store.close()


def _scenario(tmp_path: Path, n: int) -> Scenario:
    data = tmp_path / "q.jsonl"
    data.write_text("".join(f'{{"realidx": "q{i}", "question": "Question {i}?", "answer_idx": "A", '
                            f'"options": {{"A": "a", "B": "b"}}}}\n' for i in range(n)))
    return Scenario.model_validate({"name": "rc", "pipeline": "generalist", "flags": {"c": [0]},
                                    "dataset": {"source": "jsonl", "path": str(data)},
                                    "model": {"backend": "scripted", "cache": "off"},
                                    "run": {"workers": 1, "questions_per_worker": 1}})


def test_a_run_begins_one_write_a_question_and_leaves_every_pair_done_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    begun: list[int] = []
    original = sqlite_writes.try_begin

    def counting(db: object) -> bool:
        begun.append(1)
        return original(db)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite_writes, "try_begin", counting)
    runner = Runner.create(make_plan(_scenario(tmp_path, 12), base_dir=tmp_path), run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    assert len(begun) == 12 + 1  # each row with the next claim, and the first claim
    store = Store(runner.storage_url, runner.run_dir)
    rows, claims, runs = _state(store)
    store.close()
    assert sorted(rows) == sorted(f"q{i}" for i in range(12)) and claims == []
    assert Counter(runs) == Counter(rows)
