"""SQLite claims are one statement: taken only if the pair has no row and no claim, exactly once
however many stores race for it, and a finished pair is never taken again."""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.run.store.store import Store


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'study.db'}", tmp_path)


def _commit(store: Store, qid: str, owner: str, error: str | None = None) -> None:
    question = Question(dataset="medqa", qid=qid, text="Which?", options={"A": "a", "B": "b"}, gold=("A",))
    result = QuestionResult(condition="c0", dataset="medqa", qid=qid, answer=() if error else ("A",), gold=("A",),
                            correct=not error, error=error, error_kind="timeout" if error else None)
    store.commit(result, question, owner=owner)


def _claims(store: Store) -> list[tuple[str, str]]:
    with store.engine.connect() as conn:
        return [(r[0], r[1]) for r in conn.execute(sa.text("select qid, owner from mp_claims order by qid"))]


def test_a_claim_is_taken_once_and_a_finished_pair_never_again(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pair = ("c0", "medqa", "q1", 0)
    assert store.claim(pair, "a") is True
    assert store.claim(pair, "b") is False, "a held claim was taken again"
    assert _claims(store) == [("q1", "a")]
    _commit(store, "q1", "a")
    assert _claims(store) == []
    assert store.claim(pair, "b") is False, "a finished pair was claimed"
    assert store.executions() == [pair]
    store.close()


def test_an_error_row_is_claimed_only_when_errors_are_retried(tmp_path: Path) -> None:
    store = _store(tmp_path)
    pair = ("c0", "medqa", "q2", 0)
    assert store.claim(pair, "a")
    _commit(store, "q2", "a", error="timeout: slow")
    assert store.claim(pair, "b") is False
    assert store.claim(pair, "b", retry_errors=True) is True
    assert store.claim(pair, "c", retry_errors=True) is False, "the retry's claim was taken again"
    assert Counter(store.executions())[pair] == 2
    store.close()


def test_racing_stores_take_each_pair_exactly_once_while_pairs_are_committed(tmp_path: Path) -> None:
    pairs = [("c0", "medqa", f"q{i}", 0) for i in range(60)]
    stores = [_store(tmp_path) for _ in range(6)]
    taken: list[tuple[str, tuple[str, str, str, int]]] = []
    lock = threading.Lock()
    start = threading.Barrier(len(stores))

    def work(n: int) -> None:
        store, owner = stores[n], f"w{n}"
        start.wait()
        for _round in range(2):  # a second pass meets committed pairs, not only held claims
            for pair in pairs if n % 2 else reversed(pairs):
                if store.claim(pair, owner):
                    with lock:
                        taken.append((owner, pair))
                    _commit(store, pair[2], owner)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    counts = Counter(p for _, p in taken)
    assert sorted(counts) == sorted(pairs) and set(counts.values()) == {1}, counts.most_common(3)
    assert sorted(stores[0].executions()) == sorted(pairs)
    assert len(stores[0].rows()) == len(pairs) and _claims(stores[0]) == []
    for s in stores:
        s.close()


def test_on_the_loops_own_connection_a_held_write_lock_means_try_elsewhere(tmp_path: Path) -> None:
    """`claim_now` and `record_now` never wait: with another connection writing they do nothing
    and say so (None), and the waiting `claim` and `record` take over once the lock is free."""
    store = _store(tmp_path)
    pair = ("c0", "medqa", "q1", 0)
    question = Question(dataset="medqa", qid="q1", text="Which?", options={"A": "a", "B": "b"}, gold=("A",))
    result = QuestionResult(condition="c0", dataset="medqa", qid="q1", answer=("A",), gold=("A",), correct=True)
    other = sqlite3.connect(tmp_path / "study.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    assert store.claim_now(pair, "a") is None
    other.execute("ROLLBACK")
    assert _claims(store) == [] and store.executions() == []
    assert store.claim_now(pair, "a") is True
    staged = store.stage(result, question, "a")
    other.execute("BEGIN IMMEDIATE")
    assert store.record_now(staged) is None
    done: list[Any] = []
    waiting = threading.Thread(target=lambda: done.append(store.record(staged)))
    waiting.start()  # waits for the lock (busy timeout), then commits
    other.execute("ROLLBACK")
    waiting.join(60)
    assert [r.qid for r in done] == ["q1"] and _claims(store) == [] and len(store.rows()) == 1
    assert store.claim_now(pair, "b") is False, "a finished pair was claimed"
    other.close()
    store.close()


def test_the_workers_of_one_process_queue_for_the_write_and_each_pair_goes_once(tmp_path: Path) -> None:
    """One store shared by many threads (a process's workers): loops that find a writer of the
    same process at work do nothing (None), waiting writers take over, every pair is taken once."""
    store = _store(tmp_path)
    pairs = [("c0", "medqa", f"q{i}", 0) for i in range(80)]
    outcomes: list[tuple[str, bool | None]] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def work(n: int) -> None:
        start.wait()
        for pair in pairs if n % 2 else reversed(pairs):
            now = store.claim_now(pair, f"w{n}") if n < 4 else None
            taken = now if now is not None else store.claim(pair, f"w{n}")
            with lock:
                outcomes.append((pair[2], taken))
            if taken:
                _commit(store, pair[2], f"w{n}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    won = Counter(qid for qid, taken in outcomes if taken)
    assert sorted(won) == sorted(p[2] for p in pairs) and set(won.values()) == {1}
    assert len(store.rows()) == len(pairs) and _claims(store) == []
    store.close()


def test_a_writer_waits_for_another_processs_lock_until_its_deadline_then_fails(tmp_path: Path,
                                                                                 monkeypatch: Any) -> None:
    """Another connection (another process) holding the write lock past the wait: SQLite's own
    'database is locked', never a claim taken beside it; once it is free the claim goes in."""
    from medpanel.experiments.run.store import sqlite_writes

    monkeypatch.setattr(sqlite_writes, "WRITE_WAIT_S", 0.2)
    store = _store(tmp_path)
    pair = ("c0", "medqa", "q1", 0)
    other = sqlite3.connect(tmp_path / "study.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store.claim(pair, "a")
    other.execute("ROLLBACK")
    assert _claims(store) == []
    assert store.claim(pair, "a") is True and _claims(store) == [("q1", "a")]
    other.close()
    store.close()
