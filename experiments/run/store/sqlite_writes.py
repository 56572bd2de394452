"""SQLite write transactions on sqlite3 itself: begun (waiting for another process's write lock in
short steps, not SQLite's busy handler), worked, committed or rolled back; a process's writers one
at a time, the waiting ones' work folded into the next transaction (`Writers`). See
`Store._sqlite_write`."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

_T = TypeVar("_T")


WRITE_WAIT_S = 60.0
"""How long a writer waits for another process's write lock before the store fails (SQLite's
busy timeout on every other connection of a run)."""
LOOP_WAIT_S = 0.002
"""How long a worker's loop waits for another worker of its process to finish writing."""
_POLL_S = (0.0005, 0.001, 0.002, 0.005)
"""Waits between attempts at another process's write lock: short, as a transaction holds it for
a fraction of a millisecond; then `_POLL_S[-1]` each."""


def try_begin(db: sqlite3.Connection) -> bool:
    """`BEGIN IMMEDIATE` on `db`, or False, having begun nothing, when another connection holds the
    write lock; any other error is raised."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
            raise
        return False
    return True


def begin_waiting(db: sqlite3.Connection) -> None:
    """`BEGIN IMMEDIATE` on a connection that never waits itself (busy timeout 0), retried for up to
    `WRITE_WAIT_S`; then SQLite's own 'database is locked'."""
    deadline = time.monotonic() + WRITE_WAIT_S
    attempt = 0
    while not try_begin(db):
        if time.monotonic() >= deadline:
            db.execute("BEGIN IMMEDIATE")  # once more: taken, or SQLite's own error raised
            return
        time.sleep(_POLL_S[min(attempt, len(_POLL_S) - 1)])
        attempt += 1


TAKE_OVER_S = 0.002
"""How often a thread whose write waits looks whether it may write itself (`Writers.wait`)."""


class _Waiting(Generic[_T]):
    """A write a thread waits for: its work, then its outcome (set by whichever thread ran it)."""

    def __init__(self, work: Callable[[sqlite3.Connection], _T]) -> None:
        self.work = work
        self.done = threading.Event()
        self.result: _T | None = None
        self.error: BaseException | None = None

    def end(self, result: _T | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


class Writers:
    """A process's SQLite writers: one transaction at a time, each on its thread's own connection
    (`connect`); the work of threads waiting to write goes into the next transaction begun.

    Why: a write in a thread (a claim or commit that met the lock taken, `wait`) waited 45-65 ms on
    average and up to 0.9 s with 128 questions in flight per process, though a transaction holds
    the lock for a fraction of a millisecond. Each statement lets the interpreter lock go, and a
    thread gets it back only after the workers' loops (which hold it, running questions) let it go,
    up to the interpreter's switch interval (5 ms) each time: a thread's transaction held the write
    for milliseconds, and the loops, which try again and again, took the lock before the threads
    queued for it. Now a waiting thread's work is run by whoever writes next (most often a loop, in
    the transaction it has begun anyway: one commit for several writes); a thread writes itself only
    when nobody else does (it looks every `TAKE_OVER_S`).

    Each waiting work runs inside a savepoint, so one that fails is undone alone and raises in its
    own thread; a commit that fails (a full disk) fails every work of the transaction.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._turn = threading.Lock()
        """Held by the thread writing now."""
        self._mutex = threading.Lock()
        self._waiting: list[_Waiting[Any]] = []

    def now(self, work: Callable[[sqlite3.Connection], _T]) -> _T | None:
        """`work` now (with any waiting ones), or None, having done nothing, when another writer of
        this process holds the write for longer than `LOOP_WAIT_S` or another process holds it."""
        if not self._turn.acquire(timeout=LOOP_WAIT_S):
            return None
        try:
            db = self._connect()
            if not try_begin(db):
                return None  # another process is writing
            return self._transaction(db, work)
        finally:
            self._turn.release()

    def wait(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """`work`, committed: by the next writer of this process, or by this thread when none comes
        (waiting for another process's write lock, `begin_waiting`)."""
        waiting: _Waiting[_T] = _Waiting(work)
        with self._mutex:
            self._waiting.append(waiting)
        while not waiting.done.is_set():
            if self._turn.acquire(blocking=False):
                try:
                    if not waiting.done.is_set():  # nobody ran it: it is still waiting, this thread writes
                        db = self._connect()
                        begin_waiting(db)
                        self._transaction(db, None)
                except BaseException:
                    with self._mutex:  # raised here: nobody may run it later
                        if waiting in self._waiting:
                            self._waiting.remove(waiting)
                    if not waiting.done.is_set():
                        raise
                finally:
                    self._turn.release()
            else:
                waiting.done.wait(TAKE_OVER_S)
        if waiting.error is not None:
            raise waiting.error
        return waiting.result  # type: ignore[return-value]  # set with no error: the work's own

    def _transaction(self, db: sqlite3.Connection, work: Callable[[sqlite3.Connection], _T] | None) -> _T | None:
        """In the transaction `db` has begun: `work`, then every waiting work, then the commit.
        `work` failing rolls everything back and leaves the waiting ones waiting."""
        taken: list[_Waiting[Any]] = []
        try:
            out = work(db) if work is not None else None
            with self._mutex:
                taken, self._waiting = self._waiting, []
            for waiting in taken:
                db.execute("SAVEPOINT waiting")
                try:
                    result = waiting.work(db)
                except BaseException as exc:
                    db.execute("ROLLBACK TO waiting")
                    waiting.error = exc
                else:
                    waiting.result = result
                db.execute("RELEASE waiting")
            db.commit()
        except BaseException as exc:
            db.rollback()
            for waiting in taken:
                waiting.end(error=exc)
            raise
        for waiting in taken:
            waiting.done.set()
        return out
