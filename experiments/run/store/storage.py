"""The study's storage: its tables beside Optuna's, SQLAlchemy engines, and storage URLs.

SQLite runs use WAL mode and a busy timeout (readers beside the writer; writers wait for each other
instead of failing with "database is locked"); PostgreSQL serves runs spread over several machines.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from medpanel.agents.model.cache import StorageFailure, storage_cause
from medpanel.experiments.run.store.confined import UnsafePath
from medpanel.experiments.run.store.sqlite_read import check_study_file

metadata = sa.MetaData()

Key = sa.Text
"""Keys, owners and paths are unbounded text: a dataset's question ids can be long (300 characters
and more), and VARCHAR(128) refused them on PostgreSQL (SQLite never enforced a length). Databases
made before the keys became TEXT are widened when a store opens them (`widen_keys`)."""

results = sa.Table(
    "mp_results", metadata,
    sa.Column("condition", Key, primary_key=True),
    sa.Column("dataset", Key, primary_key=True),
    sa.Column("qid", Key, primary_key=True),
    sa.Column("repeat", sa.Integer, primary_key=True),
    sa.Column("answer", sa.String(64), nullable=False),
    sa.Column("gold", sa.String(64), nullable=False),
    sa.Column("correct", sa.Boolean, nullable=False),
    sa.Column("invalid", sa.Boolean, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("error_kind", sa.String(64), nullable=True),
    sa.Column("calls", sa.Integer, nullable=False),
    sa.Column("logical_calls", sa.Integer, nullable=False),
    sa.Column("tokens", sa.Integer, nullable=False),
    sa.Column("latency_s", sa.Float, nullable=False),
    sa.Column("cost_usd", sa.Float, nullable=False, default=0.0),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("transcript", Key, nullable=False),
    sa.Column("worker", Key, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=False),
)

claims = sa.Table(
    "mp_claims", metadata,
    sa.Column("condition", Key, primary_key=True),
    sa.Column("dataset", Key, primary_key=True),
    sa.Column("qid", Key, primary_key=True),
    sa.Column("repeat", sa.Integer, primary_key=True),
    sa.Column("owner", Key, nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
)

executions = sa.Table(
    "mp_executions", metadata,
    # One row per time a pair's pipeline actually started: the duplicate-execution audit.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("condition", Key, nullable=False),
    sa.Column("dataset", Key, nullable=False),
    sa.Column("qid", Key, nullable=False),
    sa.Column("repeat", sa.Integer, nullable=False),
    sa.Column("owner", Key, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
)

transcripts = sa.Table(
    "mp_transcripts", metadata,
    # Shared storage only (PostgreSQL): workers on other machines commit transcripts here, in the
    # same transaction as the row; `Store.sync_transcripts` writes them out as files.
    sa.Column("condition", Key, primary_key=True),
    sa.Column("dataset", Key, primary_key=True),
    sa.Column("qid", Key, primary_key=True),
    sa.Column("repeat", sa.Integer, primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
)

prompt_cache = sa.Table(
    "mp_prompt_cache", metadata,
    # Per finished pair: prompt tokens the endpoint's prompt cache served and what that saved at
    # the model's `cached_input` price. A table of its own (not columns of mp_results), so studies
    # made before it open unchanged; a pair without a row here had none.
    sa.Column("condition", sa.String(128), primary_key=True),
    sa.Column("dataset", sa.String(128), primary_key=True),
    sa.Column("qid", sa.String(128), primary_key=True),
    sa.Column("repeat", sa.Integer, primary_key=True),
    sa.Column("cached_tokens", sa.Integer, nullable=False),
    sa.Column("saved_usd", sa.Float, nullable=False),
)

meta = sa.Table(
    "mp_meta", metadata,
    # run.json and the questions, so `medpanel worker <url>` can join from another machine.
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

_WIDENED = {"mp_results": ("condition", "dataset", "qid", "worker", "transcript"),
            "mp_claims": ("condition", "dataset", "qid", "owner"),
            "mp_executions": ("condition", "dataset", "qid", "owner"),
            "mp_transcripts": ("condition", "dataset", "qid")}


def widen_keys(engine: sa.Engine) -> int:
    """PostgreSQL: turn the VARCHAR(n) key columns of a study made before they became TEXT into TEXT, in
    place (a metadata change for PostgreSQL: VARCHAR and TEXT share their storage). Returns how
    many columns changed; 0 on SQLite and on a current schema."""
    if engine.dialect.name != "postgresql":
        return 0
    query = sa.text("select table_name, column_name from information_schema.columns where table_schema = "
                    "current_schema() and data_type = 'character varying' and table_name = any(:tables)")
    with engine.begin() as conn:
        narrow = [(t, c) for t, c in conn.execute(query, {"tables": list(_WIDENED)}) if c in _WIDENED.get(t, ())]
        for table, column in narrow:
            conn.execute(sa.text(f'alter table {table} alter column "{column}" type text'))
    return len(narrow)


Pair = tuple[str, str, str, int]
"""(condition slug, dataset, qid, repeat)."""


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers (progress, report) run beside the writer; the busy timeout makes writers
    # wait for each other instead of failing with "database is locked".
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=60000")
    # Hundreds of questions in flight leave SQLite's automatic checkpoints no quiet moment to reset
    # the WAL, which grew to 55 MB beside a 1 MB database over 3,448 pairs; a checkpoint that does
    # reset it now truncates it to this size (see also `Store.close`).
    cur.execute("PRAGMA journal_size_limit=4194304")
    cur.close()


def optuna_engine_kwargs(url: str) -> dict[str, object]:
    """Optuna's own engine for the study: SQLite waits up to 60 s for the write lock (a busy run's
    commits hold it in turns); a server's pooled connections are checked before use."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    return {"pool_pre_ping": True}


def normalize_url(url: str) -> str:
    """`postgresql://` means the psycopg 3 driver (the `[postgres]` extra), for Optuna and the store."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def check_url(v: str) -> None:
    """A `ValueError` (one line, password redacted) unless `v` is a storage URL a run can keep its
    study in: parsable, its driver installed, not an in-memory SQLite database."""
    try:
        url = sa.engine.make_url(normalize_url(v))
        url.get_dialect()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError) as exc:
        reason = str(exc).splitlines()[0].replace(v, redact_url(v))
        raise ValueError(f"{redact_url(v)!r} is not a storage URL ({reason}). Use sqlite:///path/study.db or "
                         "postgresql://user@host/db") from None
    if in_memory(url):
        raise ValueError(f"{redact_url(v)!r} is an in-memory SQLite database, which keeps nothing and is not "
                         "shared between connections. Use sqlite:///path/study.db (or leave storage out)")


def in_memory(url: sa.engine.URL) -> bool:
    """Whether a SQLite URL's database lives only in memory (`:memory:`, no file, `mode=memory`):
    every connection would get an empty database of its own, so nothing a run does would be kept
    and the study's engines (Optuna's, the store's) would not even share one."""
    if url.get_backend_name() != "sqlite":
        return False
    name = (url.database or "").strip()
    return (not name or name == ":memory:" or name.startswith("file::memory:") or "mode=memory" in name
            or str(dict(url.query or {}).get("mode", "")) == "memory")


def redact_url(url: str) -> str:
    """A storage URL without its password, for messages and files."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url


def check_sqlite(url: str, run_dir: Path) -> None:
    """`sqlite_read.check_study_file` on the file of a `sqlite:///` URL (nothing for an in-memory one)."""
    path = sa.engine.make_url(url).database
    if path and path != ":memory:":
        check_study_file(Path(path), run_dir)


def is_shared(url: str) -> bool:
    """Storage that several processes or machines may use at once (anything but SQLite)."""
    return not url.startswith("sqlite")


def make_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        # A pool (not a connection per statement): the pragmas run once per connection, and a
        # claim or commit costs one short transaction. Each worker claims on its own thread and
        # commits on another, so 2 x workers connections are in use at once; a pool smaller than
        # that closes and reopens connections (pragmas again) on every claim. Connections open
        # lazily, so a large pool costs nothing until used.
        engine = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False},
                                  pool_size=64, max_overflow=64)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # The same 2 x workers connections at once; PostgreSQL's default of 100 connections leaves room
    # for six 8-worker processes.
    return sa.create_engine(normalize_url(url), pool_pre_ping=True, pool_size=16, max_overflow=48)


RESOURCE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EMFILE,
                   errno.ENFILE}
_SQLITE_RESOURCE = ("disk is full", "readonly database", "disk i/o error", "unable to open database file",
                    "read-only file system")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def resource_failure(exc: BaseException, url: str, run_dir: Path) -> str | None:
    """One line naming the path and the cause when `exc` is the run's own storage failing (disk
    full, read-only, no permission), or None for anything else."""
    for e in _chain(exc):
        if isinstance(e, StorageFailure | UnsafePath):  # UnsafePath: a link met mid-run, refused
            return str(e)
        if isinstance(e, OSError) and e.errno in RESOURCE_ERRNOS:
            return f"cannot write {e.filename or run_dir}: {storage_cause(e)}"
        if isinstance(e, sqlite3.Error) and any(w in str(e).lower() for w in _SQLITE_RESOURCE):
            where = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else "the study"
            return f"cannot write {where}: {storage_cause(e)}"
    return None
