"""The record of what is done: result rows and claims beside Optuna's tables, plus transcripts.

The store, not Optuna's trial states, says which (condition, question) pairs are finished: a
killed trial stays RUNNING and a failed one counts as visited, so resume reads this table. A pair
is committed by inserting its row after its transcript file is in place (written to a temporary
name, then renamed), so a crash leaves either both or a stray transcript the next attempt
overwrites, never a row without its transcript.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from medpanel.agents.redact import redact
from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.errors import UserError

metadata = sa.MetaData()

results = sa.Table(
    "mp_results", metadata,
    sa.Column("condition", sa.String(128), primary_key=True),
    sa.Column("dataset", sa.String(128), primary_key=True),
    sa.Column("qid", sa.String(128), primary_key=True),
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
    sa.Column("transcript", sa.String(512), nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("finished_at", sa.Float, nullable=False),
)

claims = sa.Table(
    "mp_claims", metadata,
    sa.Column("condition", sa.String(128), primary_key=True),
    sa.Column("dataset", sa.String(128), primary_key=True),
    sa.Column("qid", sa.String(128), primary_key=True),
    sa.Column("repeat", sa.Integer, primary_key=True),
    sa.Column("owner", sa.String(128), nullable=False),
    sa.Column("claimed_at", sa.Float, nullable=False),
)

executions = sa.Table(
    "mp_executions", metadata,
    # One row per time a pair's pipeline actually started: the duplicate-execution audit.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("condition", sa.String(128), nullable=False),
    sa.Column("dataset", sa.String(128), nullable=False),
    sa.Column("qid", sa.String(128), nullable=False),
    sa.Column("repeat", sa.Integer, nullable=False),
    sa.Column("owner", sa.String(128), nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
)

transcripts = sa.Table(
    "mp_transcripts", metadata,
    # Shared storage only (PostgreSQL): workers on other machines commit transcripts here, in the
    # same transaction as the row; `Store.sync_transcripts` writes them out as files.
    sa.Column("condition", sa.String(128), primary_key=True),
    sa.Column("dataset", sa.String(128), primary_key=True),
    sa.Column("qid", sa.String(128), primary_key=True),
    sa.Column("repeat", sa.Integer, primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
)

meta = sa.Table(
    "mp_meta", metadata,
    # run.json and the questions, so `medpanel worker <url>` can join from another machine.
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

Pair = tuple[str, str, str, int]
"""(condition slug, dataset, qid, repeat)."""


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers (progress, report) run beside the writer; the busy timeout makes writers
    # wait for each other instead of failing with "database is locked".
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def normalize_url(url: str) -> str:
    """`postgresql://` means the psycopg 3 driver (the `[postgres]` extra), for Optuna and the store."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def redact_url(url: str) -> str:
    """A storage URL without its password, for messages and files."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url


def check_sqlite(url: str) -> None:
    """Refuse a SQLite study file that is not a database or has damaged pages, naming it.

    SQLite reports damage only when a query reaches a damaged page, which may be deep inside a
    report or a resumed run; `PRAGMA quick_check` reads every page once (milliseconds for a run's
    study.db), so the problem is one line before anything else happens.
    """
    path = sa.engine.make_url(url).database
    if not path or path == ":memory:" or not Path(path).is_file() or Path(path).stat().st_size == 0:
        return
    fix = ("Restore it from a backup, or start the run again in a new --run-dir (its transcripts/ folder "
           "keeps every finished debate)")
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=60)) as conn:
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    if verdict != "ok":
        raise UserError(f"the study database is damaged ({verdict}). {fix}", file=path)


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


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

NAME_PREFIX_CHARS = 80
"""How much of an id a file name keeps readable; the hash after it carries the identity."""


def safe_stem(readable: str, *key: object) -> str:
    """A file name stem for `key`: a readable, sanitised prefix plus a hash of the exact key.

    Sanitising alone is not injective (`a/b`, `a_b` and `a b` all become `a_b`) and not bounded
    (a 300-character id exceeds the file system's 255 bytes), so the name's identity is the hash
    of the key itself (64 bits of SHA-256; the prefix is only for people reading `ls`).
    """
    digest = hashlib.sha256(json.dumps([str(k) for k in key], ensure_ascii=False).encode()).hexdigest()[:16]
    prefix = _UNSAFE.sub("_", readable)[:NAME_PREFIX_CHARS].lstrip(".")
    return f"{prefix}-{digest}" if prefix else digest


def safe_dir(name: str) -> str:
    """A directory name: `name` itself when it is already safe and short (condition slugs are), else hashed."""
    if _UNSAFE.search(name) or len(name) > NAME_PREFIX_CHARS or name.strip(".") == "":
        return safe_stem(name, name)
    return name


def inside(root: Path, relative: str) -> Path | None:
    """`root / relative` if it stays inside `root` (a path read from a database is not trusted)."""
    path = (root / relative).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def write_atomic(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if exc.errno:
            raise _naming(exc, path) from exc
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno:
            raise _naming(exc, path) from exc
        raise


def _naming(exc: OSError, path: Path) -> OSError:
    """The same error, naming the file meant (not its temporary sibling)."""
    return OSError(exc.errno, exc.strerror, str(path))


STATUS_BYTES = 2048
"""status.json is written this large (padded with spaces, still valid JSON) so that a disk that has
filled up since can still take the final status: it is then overwritten in place."""


def write_status(path: Path, status: dict[str, Any]) -> None:
    text = json.dumps(status, indent=2) + "\n"
    padded = text + " " * max(0, STATUS_BYTES - len(text.encode()))
    try:
        write_atomic(path, padded)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not path.is_file():
            raise
        size = path.stat().st_size
        data = text.encode()
        if len(data) > size:
            raise
        # No room for a new file: overwrite the old one in place, within blocks it already has.
        with open(path, "r+b") as fh:
            fh.write(data + b" " * (size - len(data)))
            fh.flush()
            os.fsync(fh.fileno())


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


@dataclass(frozen=True)
class Row:
    condition: str
    dataset: str
    qid: str
    repeat: int
    answer: str
    gold: str
    correct: bool
    invalid: bool
    error: str | None
    error_kind: str | None
    calls: int
    logical_calls: int
    tokens: int
    latency_s: float
    summary: dict[str, Any]
    transcript: str
    cost_usd: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.qid)

    @property
    def status(self) -> str:
        return "error" if self.error else "invalid" if self.invalid else "correct" if self.correct else "wrong"


class Store:
    def __init__(self, url: str, run_dir: Path) -> None:
        self.url = url
        self.run_dir = run_dir
        self.shared = is_shared(url)
        if not self.shared:
            check_sqlite(url)
        try:
            self.engine = make_engine(url)
            metadata.create_all(self.engine)
        except (sa.exc.OperationalError, sa.exc.DatabaseError, sa.exc.ArgumentError, ImportError) as exc:
            # Unreachable server, refused login, a SQLite file in a missing folder, a missing driver.
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            hint = " Install it with pip install 'medpanel[postgres]'" if isinstance(exc, ImportError) else ""
            raise UserError(f"cannot open the study storage {redact_url(url)} ({reason}).{hint} Check the URL, "
                            "that the server is running and the folder exists", field="storage") from None

    def put_meta(self, key: str, value: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(meta.delete().where(meta.c.key == key))
            conn.execute(meta.insert().values(key=key, value=value))

    def get_meta(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(meta.c.value).where(meta.c.key == key)).first()
            return row[0] if row else None

    def sync_transcripts(self) -> int:
        """Write out, as files under the run directory, transcripts committed by other machines.

        Each goes where its row says: rows of runs written with an older naming keep their names.
        """
        if not self.shared:
            return 0
        n = 0
        key = [transcripts.c[k] == results.c[k] for k in ("condition", "dataset", "qid", "repeat")]
        query = sa.select(transcripts, results.c.transcript.label("path")).join(results, sa.and_(*key))
        with self.engine.connect() as conn:
            for r in conn.execute(query):
                pair = (r.condition, r.dataset, r.qid, r.repeat)
                path = inside(self.run_dir, r.path) or self.transcript_path(pair)
                if not path.exists():
                    write_atomic(path, r.body)
                    n += 1
        return n

    def transcript_path(self, pair: Pair, tag: str | None = None) -> Path:
        """`transcripts/<condition>/<dataset>__<qid>[__r<n>]-<hash>[.<tag>].json`, one file per pair.

        Readers never recompute this: every row stores its transcript's path, so runs written with
        an older naming open unchanged. `tag` names a replacement written beside the file it replaces.
        """
        condition, dataset, qid, repeat = pair
        readable = f"{dataset}__{qid}" + (f"__r{repeat}" if repeat else "")
        name = safe_stem(readable, condition, dataset, qid, repeat) + (f".{tag}" if tag else "")
        return self.run_dir / "transcripts" / safe_dir(condition) / f"{name}.json"

    def resource_failure(self, exc: BaseException) -> str | None:
        """One line naming the path and the cause when `exc` is the run's own storage failing (disk
        full, read-only, no permission), or None for anything else."""
        from medpanel.agents.model.cache import StorageFailure, storage_cause

        for e in _chain(exc):
            if isinstance(e, StorageFailure):
                return str(e)
            if isinstance(e, OSError) and e.errno in RESOURCE_ERRNOS:
                return f"cannot write {e.filename or self.run_dir}: {storage_cause(e)}"
            if isinstance(e, sqlite3.Error) and any(w in str(e).lower() for w in _SQLITE_RESOURCE):
                where = self.url.removeprefix("sqlite:///") if self.url.startswith("sqlite:///") else "the study"
                return f"cannot write {where}: {storage_cause(e)}"
        return None

    def done(self, *, answered_only: bool = False) -> set[Pair]:
        """Pairs with a row; `answered_only` leaves out error rows (what `--retry-errors` re-runs)."""
        q = sa.select(results.c.condition, results.c.dataset, results.c.qid, results.c.repeat)
        if answered_only:
            q = q.where(results.c.error.is_(None))
        with self.engine.connect() as conn:
            return {(r[0], r[1], r[2], r[3]) for r in conn.execute(q)}

    def error_count(self) -> int:
        with self.engine.connect() as conn:
            q = sa.select(sa.func.count()).select_from(results).where(results.c.error.is_not(None))
            return int(conn.execute(q).scalar_one())

    def claim(self, pair: Pair, owner: str, *, retry_errors: bool = False) -> bool:
        """Take a pair before any model call; False if finished or someone else holds it.

        With `retry_errors`, a pair whose row is an error counts as not finished."""
        now = time.time()
        params = {**_key_params(pair), "owner": owner, "now": now}
        try:
            with self.engine.begin() as conn:
                if conn.execute(_IS_ANSWERED if retry_errors else _IS_DONE, params).first() is not None:
                    return False
                conn.execute(_INSERT_CLAIM, params)
                conn.execute(_INSERT_EXECUTION, params)
            return True
        except IntegrityError:
            return False

    def release_stale_claims(self, live_owners: Iterable[str] = (), older_than_s: float | None = None) -> int:
        """Drop claims of unfinished pairs whose owner is gone (a killed or interrupted runner).

        On a single machine every claim not held by a live owner is stale. On shared storage other
        machines' claims are live until they are `older_than_s` (a worker that died long ago).
        """
        with self.engine.begin() as conn:
            stmt = claims.delete().where(claims.c.owner.not_in(list(live_owners)))
            if older_than_s is not None:
                stmt = stmt.where(claims.c.claimed_at < time.time() - older_than_s)
            return conn.execute(stmt).rowcount or 0

    def release(self, pair: Pair, owner: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(_RELEASE_CLAIM, {**_key_params(pair), "owner": owner})

    def commit(self, result: QuestionResult, question: Question, owner: str,
               extra: dict[str, Any] | None = None, cost_usd: float = 0.0, *, replace_error: bool = False) -> Row:
        """Record a finished pair. `replace_error`: the pair has an error row (`--retry-errors`),
        which this result replaces in the same transaction; its transcript is written under a new
        name first, so until the row changes the error row's own transcript stays as it was."""
        pair = (result.condition, result.dataset, result.qid, result.repeat)
        path = self.transcript_path(pair, tag=f"retry-{uuid.uuid4().hex[:8]}" if replace_error else None)
        doc = {
            "condition": result.condition,
            "question": question.model_dump(mode="json"),
            "repeat": result.repeat,
            "answer": list(result.answer),
            "gold": list(result.gold),
            "correct": result.correct,
            "invalid": result.invalid,
            "error": result.error,
            "error_kind": result.error_kind,
            "calls": result.calls,
            "logical_calls": result.logical_calls,
            "tokens": result.tokens,
            "latency_s": result.latency_s,
            "cost_usd": cost_usd,
            "summary": result.summary,
            **(extra or {}),
            "events": [e.model_dump(mode="json") for e in result.events],
        }
        # Compact: `indent` switches json to its pure-Python encoder, several times slower on the
        # long message histories of a panel debate. `medpanel show` and the viewer format it.
        # The one place a transcript is serialised: secrets an endpoint echoed are masked here.
        body = redact(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
        write_atomic(path, body)
        values = dict(condition=pair[0], dataset=pair[1], qid=pair[2], repeat=pair[3],
                      answer=",".join(result.answer), gold=",".join(result.gold), correct=result.correct,
                      invalid=result.invalid, error=redact(result.error) if result.error else None,
                      error_kind=result.error_kind,
                      calls=result.calls, logical_calls=result.logical_calls, tokens=result.tokens,
                      latency_s=result.latency_s, cost_usd=cost_usd, summary=redact(json.dumps(result.summary)),
                      transcript=str(path.relative_to(self.run_dir)), worker=owner, finished_at=time.time())
        replaced: str | None = None
        with self.engine.begin() as conn:
            if replace_error:
                old = conn.execute(_ERROR_TRANSCRIPT, _key_params(pair)).first()
                if old is not None:
                    replaced = old[0]
                    conn.execute(_DROP_ERROR_ROW, _key_params(pair))
                    if self.shared:
                        conn.execute(_DROP_TRANSCRIPT, _key_params(pair))
            conn.execute(_INSERT_RESULT, values)
            if self.shared:
                conn.execute(_INSERT_TRANSCRIPT, {**_key_params(pair), "body": body})
            conn.execute(_DROP_CLAIM, _key_params(pair))
        if replaced is not None:
            old_path = inside(self.run_dir, replaced)
            if old_path is not None and old_path != path.resolve():
                old_path.unlink(missing_ok=True)  # the error's transcript; its row is gone
        return _row(values)

    def rows(self) -> list[Row]:
        with self.engine.connect() as conn:
            return [_row(dict(r._mapping)) for r in conn.execute(sa.select(results))]

    def executions(self) -> list[Pair]:
        with self.engine.connect() as conn:
            q = sa.select(executions.c.condition, executions.c.dataset, executions.c.qid, executions.c.repeat)
            return [(r[0], r[1], r[2], r[3]) for r in conn.execute(q)]

    def iter_transcripts(self) -> Iterator[dict[str, Any]]:
        for row in self.rows():
            yield json.loads((self.run_dir / row.transcript).read_text(encoding="utf-8"))

    def close(self) -> None:
        self.engine.dispose()


def _key_params(pair: Pair) -> dict[str, Any]:
    return {"k_condition": pair[0], "k_dataset": pair[1], "k_qid": pair[2], "k_repeat": pair[3]}


def _key_match(table: sa.Table) -> list[Any]:
    return [table.c.condition == sa.bindparam("k_condition"), table.c.dataset == sa.bindparam("k_dataset"),
            table.c.qid == sa.bindparam("k_qid"), table.c.repeat == sa.bindparam("k_repeat")]


def _key_values(**extra: Any) -> dict[str, Any]:
    return {"condition": sa.bindparam("k_condition"), "dataset": sa.bindparam("k_dataset"),
            "qid": sa.bindparam("k_qid"), "repeat": sa.bindparam("k_repeat"), **extra}


# The statements of a claim and a commit, built once: building a SQLAlchemy expression per call
# (values, where clauses, cache keys) cost several milliseconds a question, which shows directly
# in the runner's overhead per model call. Executed with a parameter dict, SQLAlchemy reuses
# their compiled form.
_IS_DONE = sa.select(results.c.qid).where(*_key_match(results))
_IS_ANSWERED = sa.select(results.c.qid).where(*_key_match(results), results.c.error.is_(None))
_ERROR_TRANSCRIPT = sa.select(results.c.transcript).where(*_key_match(results), results.c.error.is_not(None))
_DROP_ERROR_ROW = results.delete().where(*_key_match(results), results.c.error.is_not(None))
_DROP_TRANSCRIPT = transcripts.delete().where(*_key_match(transcripts))
_INSERT_CLAIM = claims.insert().values(_key_values(owner=sa.bindparam("owner"), claimed_at=sa.bindparam("now")))
_INSERT_EXECUTION = executions.insert().values(_key_values(owner=sa.bindparam("owner"),
                                                           started_at=sa.bindparam("now")))
_RELEASE_CLAIM = claims.delete().where(*_key_match(claims), claims.c.owner == sa.bindparam("owner"))
_DROP_CLAIM = claims.delete().where(*_key_match(claims))
_INSERT_RESULT = results.insert()
_INSERT_TRANSCRIPT = transcripts.insert().values(_key_values(body=sa.bindparam("body")))


def _row(v: dict[str, Any]) -> Row:
    summary = v["summary"]
    return Row(condition=v["condition"], dataset=v["dataset"], qid=v["qid"], repeat=int(v["repeat"]),
               answer=v["answer"], gold=v["gold"], correct=bool(v["correct"]), invalid=bool(v["invalid"]),
               error=v["error"], error_kind=v["error_kind"], calls=int(v["calls"]),
               logical_calls=int(v["logical_calls"]), tokens=int(v["tokens"]), latency_s=float(v["latency_s"]),
               summary=json.loads(summary) if isinstance(summary, str) else summary, transcript=v["transcript"],
               cost_usd=float(v.get("cost_usd") or 0.0))
