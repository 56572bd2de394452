"""A claim and another worker's commit, interleaved at the worst moment, on a real PostgreSQL.

PostgreSQL runs each statement of a read-committed transaction on its own snapshot, so a claim
that checked "not done" just before another worker's commit and inserted just after it took a
finished pair again (duplicate executions under load). The test pauses the second worker's claim
before its second statement, lets the first worker commit, then lets the claim go on.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.run.store.store import Store

from .conftest import needs_postgres

pytestmark = needs_postgres
PAIR = ("c0", "medqa", "q1", 0)


def _finish(store: Store) -> None:
    question = Question(dataset="medqa", qid="q1", text="Which?", options={"A": "a", "B": "b"}, gold=("A",))
    store.commit(QuestionResult(condition="c0", dataset="medqa", qid="q1", answer=("A",), gold=("A",),
                                correct=True), question, owner="first")


def test_a_claim_racing_a_commit_never_takes_the_finished_pair(tmp_path: Path, pg_url: str) -> None:
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()  # two workers' run directories, as a run makes them
    first, second = Store(pg_url, tmp_path / "a"), Store(pg_url, tmp_path / "b")
    assert first.claim(PAIR, "first")
    paused, go = threading.Event(), threading.Event()
    statements: list[str] = []

    @sa.event.listens_for(second.engine, "before_cursor_execute")
    def _hold(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement.split()[0])
        if len(statements) == 2:  # between the claim's first statement and its second
            paused.set()
            go.wait(30)

    got: list[bool] = []
    worker = threading.Thread(target=lambda: got.append(second.claim(PAIR, "second")))
    worker.start()
    paused.wait(5)  # the claim may also end before a second statement (it met the first's claim)
    _finish(first)
    go.set()
    worker.join(30)
    assert got == [False], (got, statements)
    with first.engine.connect() as conn:
        executions = conn.execute(sa.text("select owner from mp_executions")).fetchall()
        claims = conn.execute(sa.text("select owner from mp_claims")).fetchall()
    assert executions == [("first",)] and claims == [], (executions, claims)
    assert second.claim(PAIR, "second") is False  # and a later claim finds the row
