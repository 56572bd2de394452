"""A finished SQLite run's rows and kept run.json, read with sqlite3 alone (no SQLAlchemy).

The report, `export` and the other readers read a run's result rows once and write nothing to its
study; opening the store for that (`store.Store`: SQLAlchemy's engine, its pool and the schema's
creation, a second of imports and set-up on a loaded machine) is the runner's machinery. A study
of the current schema is read here with the store's own query (`ROWS_SQL` is `store_sql.ROWS` as
SQLAlchemy compiles it for SQLite, which a test holds it to), so the rows, and their order, are the
store's. A study of an older schema (a table or column missing, which `Store` would add) returns
None: the caller opens the store, which brings it up to date.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.rows import Row, row_of

ROWS_SQL = (
    "SELECT mp_results.condition, mp_results.dataset, mp_results.qid, mp_results.repeat, mp_results.answer, "
    "mp_results.gold, mp_results.correct, mp_results.invalid, mp_results.error, mp_results.error_kind, "
    "mp_results.calls, mp_results.logical_calls, mp_results.tokens, mp_results.latency_s, mp_results.cost_usd, "
    "mp_results.summary, mp_results.transcript, mp_results.worker, mp_results.finished_at, "
    "mp_prompt_cache.cached_tokens, mp_prompt_cache.saved_usd \n"
    "FROM mp_results LEFT OUTER JOIN mp_prompt_cache ON mp_results.condition = mp_prompt_cache.condition AND "
    "mp_results.dataset = mp_prompt_cache.dataset AND mp_results.qid = mp_prompt_cache.qid AND "
    "mp_results.repeat = mp_prompt_cache.repeat"
)
"""`store_sql.ROWS` compiled for SQLite: the same statement, so the same plan and row order."""
RUN_JSON_SQL = "SELECT value FROM mp_meta WHERE key = 'run_json'"
TABLES = {"mp_results", "mp_prompt_cache", "mp_meta"}
"""The tables the rows are read from; a study without one of them is an older schema."""


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}


def connect_existing(db: Path) -> sqlite3.Connection:
    """An ordinary connection to the study file `db`, which must exist (sqlite3 would create an
    empty one): `mode=rw`, so SQLite still reads, and as the last connection cleans up, the WAL."""
    return sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True, timeout=60)


def _current(conn: sqlite3.Connection) -> bool:
    """The study has the tables and columns the rows are read from (`Store` adds what an older one lacks)."""
    tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return (TABLES <= tables and _ROW_COLUMNS <= _columns(conn, "mp_results")
            and {"cached_tokens", "saved_usd"} <= _columns(conn, "mp_prompt_cache"))


def study_pair_count(db: Path) -> int | None:
    """How many pairs have a result row (each pair has at most one: the table's key); None when the
    study's schema is not the current one."""
    with contextlib.closing(connect_existing(db)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM mp_results").fetchone()[0]) if _current(conn) else None


def study_rows(db: Path) -> tuple[str | None, list[Row]] | None:
    """The run.json the study keeps (None without one) and its result rows, in the store's order;
    None when the study's schema is not the current one (the store's reading brings it up to date).
    The file is checked first (`check_study_file`)."""
    with contextlib.closing(connect_existing(db)) as conn:
        if not _current(conn):
            return None
        found = conn.execute(RUN_JSON_SQL).fetchone()
        cursor = conn.execute(ROWS_SQL)
        names = [d[0] for d in cursor.description]
        rows = [row_of(dict(zip(names, values, strict=True))) for values in cursor]
    return (None if found is None else str(found[0])), rows


_ROW_COLUMNS = {"condition", "dataset", "qid", "repeat", "answer", "gold", "correct", "invalid", "error", "error_kind",
                "calls", "logical_calls", "tokens", "latency_s", "cost_usd", "summary", "transcript", "worker",
                "finished_at"}


def check_study_file(db: Path, run_dir: Path) -> None:
    """Refuse a SQLite study file that is not a database or has damaged pages, naming it; and, when
    it is the run directory's own, one that is a link or has other names (SQLite writes it, and its
    journal beside it, in place: `confined`).

    SQLite reports damage only when a query reaches a damaged page, which may be deep inside a
    report or a resumed run; `PRAGMA quick_check` reads every page once (milliseconds for a run's
    study.db), so the problem is one line before anything else happens.
    """
    path = str(db)
    if Path(path).parent.resolve() == Path(run_dir).resolve():
        own = Confined(run_dir)
        for suffix in ("", "-wal", "-shm", "-journal"):
            own.check_file(Path(path).name + suffix, in_place=True)
    if not Path(path).is_file() or Path(path).stat().st_size == 0:
        return
    fix = ("Restore it from a backup, or start the run again in a new --run-dir (its transcripts/ folder "
           "keeps every finished debate)")
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=60)) as conn:
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    if verdict != "ok":
        folder = Path(path).parent
        if not os.access(folder, os.W_OK) or not os.access(path, os.W_OK):
            # SQLite writes its journal beside the study even to read it: a read-only folder or
            # filesystem fails like a damaged file, and "restore from a backup" would be wrong advice.
            raise UserError(f"cannot be opened: {folder} is read-only (a read-only filesystem or folder), and "
                            "SQLite writes its journal beside the study even to read it. Copy the run directory "
                            "to a writable place, or make it writable", file=path)
        raise UserError(f"the study database is damaged ({verdict}). {fix}", file=path)
