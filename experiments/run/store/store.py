"""The record of what is done: result rows and claims beside Optuna's tables, plus transcripts.

The store, not Optuna's trial states, says which (condition, question) pairs are finished: a
killed trial stays RUNNING and a failed one counts as visited, so resume reads this table. A pair
is committed by inserting its row after its transcript is whole in the worker's transcript log
(`transcript_log`: one line appended to one file per worker, the row naming its bytes), so a crash
of the process leaves either both or a stray record, never a row without its whole transcript; no
execution writes over another's record (each is appended after every other). Neither is fsynced
(SQLite runs with `synchronous=NORMAL`), so that holds for the process, not for a power loss or
kernel crash, after which the last seconds' writes (rows or records) may be lost; see
docs/operations.md.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from medpanel.agents.redact import redact
from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store import store_sql as sql
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.files import file_per_pair, own_path, row_file
from medpanel.experiments.run.store.records import TranscriptRecord, summary_record
from medpanel.experiments.run.store.rows import Row as Row  # re-exported: readers import it from the store
from medpanel.experiments.run.store.rows import row_of
from medpanel.experiments.run.store.sqlite_writes import Writers
from medpanel.experiments.run.store.storage import (
    Pair,
    check_sqlite,
    claims,
    executions,
    is_shared,
    make_engine,
    meta,
    metadata,
    redact_url,
    resource_failure,
    results,
    transcripts,
    widen_keys,
)
from medpanel.experiments.run.store.transcript_log import TranscriptLog, copy_log, parse_reference, record_path

_T = TypeVar("_T")


@dataclass(frozen=True)
class Staged:
    """A finished pair whose transcript is written and whose row is ready (`Store.stage`)."""

    pair: Pair
    transcript: str
    """What the row names: its record in this worker's log."""
    body: str
    values: dict[str, object]
    replace_error: bool
    cached_tokens: int
    cache_saved_usd: float


class Store:
    def __init__(self, url: str, run_dir: Path) -> None:
        self.url = url
        self.run_dir = run_dir
        self.folder = Confined(run_dir)  # the run directory's writer: transcripts never go through a link
        self.shared = is_shared(url)
        self.log = TranscriptLog(self.folder, sync=self.shared)
        """This store's (this worker's) transcript file, opened on its first record."""
        self._local = threading.local()
        self._own: list[sqlite3.Connection] = []
        """The threads' own connections (`_now`), closed with the store."""
        self._lock = threading.Lock()
        self._writers = Writers(self._now)
        """This process's SQLite writers, one at a time (`_sqlite_write`)."""
        if not self.shared:
            check_sqlite(url, run_dir)
        try:
            self.engine = make_engine(url)
            metadata.create_all(self.engine)
            widen_keys(self.engine)
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
        """Write out, under the run directory, transcripts committed by other machines; how many.

        Each goes where its row says: rows of runs written with an older naming keep their files,
        and a log record goes to its byte range in a copy of its worker's log (`_sync_logs`).
        """
        if not self.shared:
            return 0
        n = 0
        key = [transcripts.c[k] == results.c[k] for k in ("condition", "dataset", "qid", "repeat")]
        query = sa.select(transcripts, results.c.transcript.label("path")).join(results, sa.and_(*key))
        logs: dict[str, list[tuple[int, int, str]]] = {}
        with self.engine.connect() as conn:
            for r in conn.execute(query):
                parsed = parse_reference(r.path)
                if parsed is not None and own_path(parsed[0]) is not None:
                    logs.setdefault(parsed[0], []).append((parsed[1], parsed[2], r.body))
                    continue
                pair = (r.condition, r.dataset, r.qid, r.repeat)
                relative = own_path(r.path) or self.transcript_path(pair).relative_to(self.run_dir)
                with contextlib.suppress(FileExistsError):  # a file already there is never replaced
                    self.folder.write(relative, r.body, replace=False)
                    n += 1
        return n + sum(copy_log(self.folder, name, records, writing=self.log.name) for name, records in logs.items())

    def transcript_path(self, pair: Pair, tag: str | None = None) -> Path:
        """`file_per_pair`'s path under this run directory."""
        return self.run_dir / file_per_pair(pair, tag)

    def resource_failure(self, exc: BaseException) -> str | None:
        """One line naming the path and the cause when `exc` is the run's own storage failing (disk
        full, read-only, no permission), or None for anything else."""
        return resource_failure(exc, self.url, self.run_dir)

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
        taken = self._claim(pair, owner, retry_errors, wait=True)
        assert taken is not None
        return taken

    def claim_now(self, pair: Pair, owner: str, *, retry_errors: bool = False) -> bool | None:
        """`claim` on this thread's own SQLite connection (`_now`), or None, having done
        nothing, when another connection holds the write lock (then `claim` in a thread)."""
        return self._claim(pair, owner, retry_errors, wait=False)

    def _claim(self, pair: Pair, owner: str, retry_errors: bool, wait: bool) -> bool | None:
        if not self.shared:
            # SQLite: one statement takes the claim if the pair is open. A write transaction holds
            # the database's one write lock from its start (`BEGIN IMMEDIATE`), so its check and
            # its insert see one state no commit can change in between; an existing claim makes it
            # insert nothing instead of raising. (On PostgreSQL an `ON CONFLICT` insert that waits
            # for a committing worker's claim goes ahead once that commit deletes it, so there the
            # claim goes in before a check in its own statement, below.)
            return self._sqlite_write(lambda db: self._take(db, pair, owner, retry_errors), wait)
        params = {**sql.key_params(pair), "owner": owner, "now": time.time()}
        try:
            with self.engine.begin() as conn:
                # The claim goes in before the check, never after. A commit inserts the row and
                # deletes its claim in one transaction, so an insert that succeeds either met no
                # claim (the pair was never taken, or its commit is visible to the next statement)
                # or waited for that commit. Checking first let a check that ran just before
                # another worker's commit be followed by an insert just after it: on PostgreSQL
                # (read committed) that executed finished pairs a second time.
                conn.execute(sql.INSERT_CLAIM, params)
                if conn.execute(sql.IS_ANSWERED if retry_errors else sql.IS_DONE, params).first() is not None:
                    raise _Finished  # leaving the block rolls the claim back
                conn.execute(sql.INSERT_EXECUTION, params)
            return True
        except (IntegrityError, _Finished):
            return False

    @staticmethod
    def _take(db: sqlite3.Connection, pair: Pair, owner: str, retry_errors: bool) -> bool:
        """A claim's statements inside a SQLite write transaction already begun (see `_claim`)."""
        params = {**sql.key_params(pair), "owner": owner, "now": time.time()}
        taken = bool(db.execute(sql.CLAIM_SQL_ANSWERABLE if retry_errors else sql.CLAIM_SQL_OPEN,
                                params).rowcount == 1)
        if taken:
            db.execute(sql.EXECUTION_SQL, params)
        return taken

    def _sqlite_write(self, work: Callable[[sqlite3.Connection], _T], wait: bool) -> _T | None:
        """`work` in one write transaction on this thread's own sqlite3 connection (`_now`), committed.

        On the sqlite3 connection, not through SQLAlchemy: its execution path (compiled-cache
        lookups, result objects, its transaction objects) cost more CPU than the statements.
        `BEGIN IMMEDIATE` takes the write lock before the first statement, so the transaction
        either waits for it (or, `wait=False`, gives up before doing anything) or has it for
        every statement. sqlite3's errors are its own, which `resource_failure` reads like
        SQLAlchemy's wrapped ones.

        The writers of this process write one at a time (`sqlite_writes.Writers`), a waiting one's
        work done in the next writer's transaction. SQLite's own busy handler polls a taken lock
        with sleeps growing to 100 ms, and a writer asleep in it lost the lock, again and again, to
        those that found it free between its polls (the workers' loops, `wait=False`): claims
        waited 0.1 s on average and seconds at worst, each a question in flight held back. Only
        another process's writer is still polled for (`sqlite_writes.begin_waiting`), in steps of a
        few milliseconds.
        """
        if not wait:
            # Another worker of this process writing holds it for a transaction, a fraction of a
            # millisecond (sqlite3 lets the interpreter lock go meanwhile): waited for there, as a
            # hand-off to a thread cost more CPU. Longer (it waits for another process): elsewhere.
            return self._writers.now(work)
        return self._writers.wait(work)

    def _now(self) -> sqlite3.Connection:
        """This thread's own connection that never waits for SQLite's write lock (busy timeout 0).

        A worker's event loop claims and commits on it, on the loop's own thread: handing each
        claim and commit to a thread of the store (a future, a wake-up of that thread, the
        interpreter lock passed back and forth, a wake-up of the loop) cost more CPU than the
        statements themselves. Waiting on the loop's thread for another process's or worker's
        write would stall every question in flight on it, so a transaction that meets the lock
        taken does nothing and the caller runs it in a thread instead (`wait=True`).
        """
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            raw = self.engine.raw_connection()  # the pool's connect settings and pragmas
            db = raw.driver_connection
            assert isinstance(db, sqlite3.Connection)
            raw.detach()  # this thread's for good: closed with the store, not returned to the pool
            db.execute("PRAGMA busy_timeout=0")
            self._local.db = db
            with self._lock:
                self._own.append(db)
        return db

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

    def release_owned(self, owners: list[str]) -> int:
        """Drop every claim of these owners (processes of this machine that ended without finishing)."""
        with self.engine.begin() as conn:
            return conn.execute(claims.delete().where(claims.c.owner.in_(owners))).rowcount or 0

    def release(self, pair: Pair, owner: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sql.RELEASE_CLAIM, {**sql.key_params(pair), "owner": owner})

    def commit(self, result: QuestionResult, question: Question, owner: str, cost_usd: float = 0.0, *,
               replace_error: bool = False, cache_saved_usd: float = 0.0) -> Row:
        """Record a finished pair. `replace_error`: the pair has an error row (`--retry-errors`),
        which this result replaces in the same transaction; its transcript is written under a new
        name first, so until the row changes the error row's own transcript stays as it was."""
        return self.record(self.stage(result, question, owner, cost_usd, replace_error=replace_error,
                                      cache_saved_usd=cache_saved_usd))

    def stage(self, result: QuestionResult, question: Question, owner: str, cost_usd: float = 0.0, *,
              replace_error: bool = False, cache_saved_usd: float = 0.0) -> Staged:
        """The first half of `commit`: the transcript appended to this worker's log, the row's values
        (naming the record's bytes) ready for `record`."""
        pair = (result.condition, result.dataset, result.qid, result.repeat)
        record = TranscriptRecord.of(result, question, cost_usd, cached_tokens=result.cached_tokens,
                                     cache_saved_usd=cache_saved_usd)
        # Compact, by pydantic's own serialiser: a fifth of the CPU of dumping to Python objects and
        # encoding those with json (the same document; a float may read 1e-5 where json wrote 1e-05).
        # `medpanel show` and the viewer format it. The one place a transcript is serialised:
        # secrets an endpoint echoed are masked here.
        body = redact(record.model_dump_json())
        # Whole before the row commits; fsynced only on shared storage, as the row's commit is not
        # on SQLite. A retry's record follows the error's, which stays until its row is replaced.
        ref = self.log.append(body)
        values = dict(condition=pair[0], dataset=pair[1], qid=pair[2], repeat=pair[3],
                      answer=",".join(result.answer), gold=",".join(result.gold), correct=result.correct,
                      invalid=result.invalid, error=redact(result.error) if result.error else None,
                      error_kind=result.error_kind,
                      calls=result.calls, logical_calls=result.logical_calls, tokens=result.tokens,
                      latency_s=result.latency_s, cost_usd=cost_usd,
                      summary=redact(json.dumps(summary_record(result))),
                      transcript=ref, worker=owner, finished_at=time.time())
        return Staged(pair=pair, transcript=ref, body=body, values=values, replace_error=replace_error,
                      cached_tokens=result.cached_tokens, cache_saved_usd=cache_saved_usd)

    def record(self, staged: Staged) -> Row:
        """The second half of `commit`: the row in, the claim out, in one transaction."""
        done = self._record(staged, wait=True)
        assert done is not None
        return done[0]

    def record_now(self, staged: Staged) -> Row | None:
        """`record` on this thread's own SQLite connection (`_now`), or None, having changed
        nothing, when another connection holds the write lock (then `record` in a thread)."""
        done = self._record(staged, wait=False)
        return None if done is None else done[0]

    def record_and_claim_now(self, staged: Staged, then: Pair, owner: str, *,
                             retry_errors: bool = False) -> tuple[Row, bool] | None:
        """`record_now` and the claim of the lane's next pair `then` (as `claim_now`) in one SQLite
        transaction: (the row, whether `then` was taken), or None, having changed nothing.

        A write transaction costs more than the statements of a claim (its begin, its commit, the
        claims' page written to the WAL twice): one for both saves about 30 us a question. A kill
        at any point leaves both or neither: the row with its claim dropped and the next pair
        claimed, or the finished pair still claimed and its next one free (a resume releases the
        claim and runs the pair again; its record in the log stays, unnamed)."""
        return self._record(staged, wait=False, then=(then, owner, retry_errors))

    def _record(self, staged: Staged, wait: bool,
                then: tuple[Pair, str, bool] | None = None) -> tuple[Row, bool] | None:
        values, key = staged.values, sql.key_params(staged.pair)
        prompt = {**key, "cached": staged.cached_tokens, "saved": staged.cache_saved_usd}
        replaced: list[str] = []
        taken = False
        if not self.shared:
            def insert(db: sqlite3.Connection) -> bool:
                nonlocal taken
                if staged.replace_error:
                    old = db.execute(sql.ERROR_TRANSCRIPT_SQL, key).fetchone()
                    if old is not None:
                        replaced.append(old[0])
                        db.execute(sql.DROP_ERROR_ROW_SQL, key)
                        db.execute(sql.DROP_PROMPT_CACHE_SQL, key)
                db.execute(sql.INSERT_RESULT_SQL, values)
                if staged.cached_tokens or staged.cache_saved_usd:
                    db.execute(sql.INSERT_PROMPT_CACHE_SQL, prompt)
                db.execute(sql.DROP_CLAIM_SQL, key)
                if then is not None:
                    taken = self._take(db, *then)
                return True

            if self._sqlite_write(insert, wait) is None:
                return None
        else:
            assert then is None, "a claim goes with a record on SQLite only"
            with self.engine.begin() as conn:
                if staged.replace_error:
                    old = conn.execute(sql.ERROR_TRANSCRIPT, key).first()
                    if old is not None:
                        replaced.append(old[0])
                        conn.execute(sql.DROP_ERROR_ROW, key)
                        conn.execute(sql.DROP_TRANSCRIPT, key)
                        conn.execute(sql.DROP_PROMPT_CACHE, key)
                conn.execute(sql.INSERT_RESULT, values)
                if staged.cached_tokens or staged.cache_saved_usd:
                    conn.execute(sql.INSERT_PROMPT_CACHE, prompt)
                conn.execute(sql.INSERT_TRANSCRIPT, {**key, "body": staged.body})
                conn.execute(sql.DROP_CLAIM, key)
        for relative in replaced:
            gone = None if parse_reference(relative) else own_path(relative)  # a log's record stays, unnamed
            if gone is not None and relative != staged.transcript:
                self.folder.unlink(gone)  # the error's transcript; its row is gone
        return row_of(values | {"cached_tokens": staged.cached_tokens, "saved_usd": staged.cache_saved_usd}), taken

    def rows(self) -> list[Row]:
        with self.engine.connect() as conn:
            return [row_of(dict(r._mapping)) for r in conn.execute(sql.ROWS)]

    def executions(self) -> list[Pair]:
        with self.engine.connect() as conn:
            q = sa.select(executions.c.condition, executions.c.dataset, executions.c.qid, executions.c.repeat)
            return [(r[0], r[1], r[2], r[3]) for r in conn.execute(q)]

    def iter_transcripts(self) -> Iterator[dict[str, Any]]:
        for row in self.rows():
            parsed = parse_reference(row.transcript)
            row_file(self.run_dir, parsed[0] if parsed else row.transcript)  # refuses a path out of the run
            yield json.loads(record_path(self.run_dir, row.transcript).read_bytes())

    def close(self) -> None:
        self.log.close()
        with self._lock:
            own, self._own = self._own, []
        for db in own:
            db.close()
        if not self.shared:
            # The run is at rest: fold the WAL into the database and truncate it, so the study
            # file's size is its data's (a busy run's WAL otherwise stays at its peak).
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            except sa.exc.DBAPIError:
                pass  # a full or read-only disk: the WAL stays, and SQLite still reads it
        self.engine.dispose()


class _Finished(Exception):
    """A claim met the pair's row: roll the claim back."""
