"""A process's SQLite writers (`store/sqlite_writes.Writers`): one transaction at a time, the work
of threads waiting to write done in the next transaction begun, each waiting work's failure its
own, a failed commit every waiting work's."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.run.store import sqlite_writes
from medpanel.experiments.run.store.sqlite_writes import Writers


class _Db:
    """Each thread's own connection to one WAL file (as the store's `_now`), and every BEGIN seen."""

    def __init__(self, path: Path, *, foreign_keys: bool = False) -> None:
        self.path = path
        self.foreign_keys = foreign_keys
        self.local = threading.local()
        self.begun: list[str] = []
        self.all: list[sqlite3.Connection] = []
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")

    def connect(self) -> sqlite3.Connection:
        db = getattr(self.local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, check_same_thread=False)
            db.execute("PRAGMA busy_timeout=0")
            if self.foreign_keys:
                db.execute("PRAGMA foreign_keys=ON")
            db.set_trace_callback(lambda s: self.begun.append(s) if s.startswith("BEGIN") else None)
            self.local.db = db
            self.all.append(db)
        return db

    def keys(self) -> list[str]:
        with sqlite3.connect(self.path) as db:
            return sorted(k for (k,) in db.execute("SELECT k FROM t"))

    def close(self) -> None:
        for db in self.all:
            db.close()


def _insert(key: str) -> Any:
    def work(db: sqlite3.Connection) -> str:
        db.execute("INSERT INTO t VALUES (?)", (key,))
        return key
    return work


def _waiting(writers: Writers, work: Any, out: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            out[name] = writers.wait(work)
        except BaseException as exc:  # what the waiting thread got, for the test to read
            out[name] = exc
    t = threading.Thread(target=run)
    t.start()
    return t


def _queued(writers: Writers, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(writers._waiting) < n:  # the test waits for the threads to queue
        assert time.monotonic() < deadline, "the waiting writes never queued"
        time.sleep(0.001)


class _Held:
    """A writer's work held inside its transaction until `go`, so threads queue behind it meanwhile;
    then `then` runs in that transaction."""

    def __init__(self, then: Any) -> None:
        self.inside, self.go, self.then = threading.Event(), threading.Event(), then

    def __call__(self, conn: sqlite3.Connection) -> Any:
        self.inside.set()
        assert self.go.wait(10)
        return self.then(conn)


def test_writes_waiting_in_threads_go_into_the_transaction_of_the_writer_at_work(tmp_path: Path) -> None:
    db = _Db(tmp_path / "w.db")
    writers = Writers(db.connect)
    slow = _Held(_insert("loop"))

    out: dict[str, Any] = {}
    loop = threading.Thread(target=lambda: out.update(loop=writers.now(slow)))
    loop.start()
    assert slow.inside.wait(10)
    threads = [_waiting(writers, _insert(f"t{i}"), out, f"t{i}") for i in range(3)]
    _queued(writers, 3)
    slow.go.set()
    for t in [loop, *threads]:
        t.join(10)
    assert out == {"loop": "loop", "t0": "t0", "t1": "t1", "t2": "t2"}
    assert db.keys() == ["loop", "t0", "t1", "t2"]
    assert len(db.begun) == 1, db.begun  # one transaction for all four
    db.close()


def test_a_waiting_work_that_fails_is_undone_alone_and_raises_in_its_own_thread(tmp_path: Path) -> None:
    db = _Db(tmp_path / "w.db")
    writers = Writers(db.connect)
    slow = _Held(_insert("loop"))

    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('half')")
        raise ValueError("the second statement failed")

    out: dict[str, Any] = {}
    loop = threading.Thread(target=lambda: out.update(loop=writers.now(slow)))
    loop.start()
    assert slow.inside.wait(10)
    threads = [_waiting(writers, _insert("before"), out, "before")]
    _queued(writers, 1)
    threads.append(_waiting(writers, half_then_fail, out, "bad"))
    _queued(writers, 2)
    threads.append(_waiting(writers, _insert("after"), out, "after"))
    _queued(writers, 3)
    slow.go.set()
    for t in [loop, *threads]:
        t.join(10)
    assert isinstance(out.pop("bad"), ValueError)
    assert out == {"loop": "loop", "before": "before", "after": "after"}
    assert db.keys() == ["after", "before", "loop"]  # 'half' undone with its work alone
    db.close()


def test_a_failed_commit_fails_every_work_of_its_transaction(tmp_path: Path) -> None:
    db = _Db(tmp_path / "w.db", foreign_keys=True)
    writers = Writers(db.connect)

    def orphan(conn: sqlite3.Connection) -> str:
        # Deferred: the foreign key is checked at the commit, which fails (as a full disk would).
        conn.execute("PRAGMA defer_foreign_keys=ON")
        conn.execute("INSERT INTO child VALUES ('orphan')")
        return "loop"

    slow = _Held(orphan)

    with sqlite3.connect(db.path) as setup:
        setup.execute("CREATE TABLE parent (k TEXT PRIMARY KEY)")
        setup.execute("CREATE TABLE child (k TEXT REFERENCES parent (k))")
    out: dict[str, Any] = {}

    def loop_write() -> None:
        try:
            out["loop"] = writers.now(slow)
        except sqlite3.Error as exc:
            out["loop"] = exc

    loop = threading.Thread(target=loop_write)
    loop.start()
    assert slow.inside.wait(10)
    threads = [_waiting(writers, _insert(f"t{i}"), out, f"t{i}") for i in range(2)]
    _queued(writers, 2)
    slow.go.set()
    for t in [loop, *threads]:
        t.join(10)
    assert all(isinstance(v, sqlite3.IntegrityError) for v in out.values()), out
    assert db.keys() == []
    db.close()


def test_a_waiting_thread_writes_itself_when_nobody_else_does_and_waits_for_another_process(
        tmp_path: Path) -> None:
    db = _Db(tmp_path / "w.db")
    writers = Writers(db.connect)
    other = sqlite3.connect(db.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing
    assert writers.now(_insert("loop")) is None  # the loop's attempt does nothing
    out: dict[str, Any] = {}
    t = _waiting(writers, _insert("thread"), out, "thread")
    time.sleep(0.05)
    assert "thread" not in out
    other.execute("ROLLBACK")
    t.join(10)
    assert out == {"thread": "thread"} and db.keys() == ["thread"]
    other.close()
    db.close()


def test_a_write_that_gave_up_waiting_is_never_run_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _Db(tmp_path / "w.db")
    writers = Writers(db.connect)
    monkeypatch.setattr(sqlite_writes, "WRITE_WAIT_S", 0.05)
    other = sqlite3.connect(db.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    ran: list[int] = []

    def work(conn: sqlite3.Connection) -> None:
        ran.append(1)

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        writers.wait(work)
    other.execute("ROLLBACK")
    assert writers.now(_insert("next")) == "next"
    assert ran == [] and db.keys() == ["next"]
    other.close()
    db.close()
