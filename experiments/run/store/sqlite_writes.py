"""SQLite write transactions on sqlite3 itself: begun (waiting for another process's write lock in
short steps, not SQLite's busy handler), worked, committed or rolled back. See `Store._sqlite_write`."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def finish(db: sqlite3.Connection, work: Callable[[sqlite3.Connection], _T]) -> _T:
    """`work` inside the transaction `db` has just begun, then its commit; rolled back if either fails."""
    try:
        out = work(db)
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return out


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
