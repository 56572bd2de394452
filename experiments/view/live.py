"""The live view of a running run: what `medpanel view` shows while pairs are still finishing.

It reads only what the runner already writes, read-only: the study's rows (a SQLite study opened
`mode=ro`, which WAL lets run beside the writers; a PostgreSQL study by plain SELECTs), status.json
and the run's lock, and a question's transcripts when its page is asked for. Nothing is written to
the run while it runs, and nothing here takes a lock a runner waits on, so `--processes N` and
PostgreSQL workers elsewhere run as fast as without it. When the view closes, the empty WAL and
shared-memory files its read-only connection made are removed once no writer is left
(`leave_no_wal`), so the run folder is left as it was found.

Figures come from the rows' own fields and summaries (accuracy with its Wilson interval, invalid
and error counts, calls, tokens and cost, recruits and retrieved passages), so a study whose
transcripts sit on other machines still shows them. When the run stops, `medpanel view` builds the
finished report (`report --html`'s own builder) and the page turns into it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from medpanel.experiments.analysis.digest import read_digests
from medpanel.experiments.analysis.stats import wilson_ci
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store import store_sql as sql
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row, row_of
from medpanel.experiments.run.store.rundir import RunData, read_questions, sa_url_path, storage_url
from medpanel.experiments.run.store.runlock import lock_holder
from medpanel.experiments.run.store.sqlite_read import connect_existing
from medpanel.experiments.run.store.storage import make_engine
from medpanel.experiments.view.pages import row_key
from medpanel.experiments.view.server import json_answer
from medpanel.experiments.view.viewer import PageContext, environment, page_name, question_page, run_header

LATEST = 12
"""Debates listed as the latest finished."""
MIN_FOR_ALERT = 5
"""Rows a condition needs before a rate of zero (or of every reply) is called broken, not chance."""
FRESH_S = 1.0
"""A snapshot is reused for this long: many open tabs cost one read of the study."""


def _recruits(summary: dict[str, object]) -> int:
    v = summary.get("recruited") or 0
    return len(v) if isinstance(v, list) else int(v) if isinstance(v, int | float) else 0


def _passages(summary: dict[str, object]) -> int | None:
    """Passages the knowledge channel retrieved for the pair; None when it did not run."""
    v = summary.get("passages_retrieved")
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


class RowReader:
    """The study's rows (with when each finished), read without writing or locking anything."""

    def __init__(self, run_dir: Path, record: RunRecord) -> None:
        url = storage_url(run_dir, record)
        db = sa_url_path(url) if url.startswith("sqlite") else None
        if db is not None:
            uri = f"{db.absolute().as_uri()}?mode=ro"
            # A connection per read, closed after it (NullPool): the server reads on many threads,
            # and a held connection would keep an old snapshot of the WAL.
            self.engine = sa.create_engine("sqlite://", poolclass=sa.pool.NullPool, creator=lambda: sqlite3.connect(
                uri, uri=True, timeout=5, check_same_thread=False))
        else:
            self.engine = make_engine(url)
        self.db = db

    def rows(self) -> list[tuple[Row, float]]:
        with self.engine.connect() as conn:
            found = [dict(r._mapping) for r in conn.execute(sql.ROWS)]
        return [(row_of(v), float(v.get("finished_at") or 0.0)) for v in found]

    def close(self) -> None:
        self.engine.dispose()
        if self.db is not None:
            leave_no_wal(self.db)


def leave_no_wal(db: Path) -> None:
    """Remove the empty WAL and shared-memory files a read-only connection made beside a study
    whose writers have all closed: SQLite cannot remove them from a read-only connection, and
    only the last connection to close may. One ordinary connection, opened and closed, is that
    last one when no writer is left (its close checkpoints nothing, the WAL being empty, and
    deletes both files); while a writer still holds the study its close is not the last and
    changes nothing. A WAL that holds pages (a writer that died mid-run) is left for the runner's
    resume to recover."""
    wal = db.with_name(db.name + "-wal")
    try:
        if wal.stat().st_size != 0:
            return
    except FileNotFoundError:
        return
    with contextlib.closing(connect_existing(db)) as conn:
        conn.execute("select count(*) from sqlite_master").fetchone()  # a connection that never read leaves them


def condition_view(cond: str, rows: list[Row], flags: dict[str, int | str]) -> dict[str, object]:
    """One condition's figures so far: accuracy over the answered pairs with its 95% Wilson interval
    (invalid replies count as wrong, errors are left out, as in the report's accuracy table)."""
    scored = [r for r in rows if not r.error]
    k = sum(1 for r in scored if r.correct)
    lo, hi = wilson_ci(k, len(scored)) if scored else (0.0, 0.0)
    recruited = sum(1 for r in scored if _recruits(r.summary) > 0)
    passages = [_passages(r.summary) for r in scored]
    used = [p for p in passages if p is not None]
    return {"condition": cond, "done": len(rows), "scored": len(scored), "correct": k,
            "accuracy": k / len(scored) if scored else None, "ci": [lo, hi],
            "invalid": sum(1 for r in rows if r.invalid and not r.error), "errors": sum(1 for r in rows if r.error),
            "calls": sum(r.calls for r in rows), "tokens": sum(r.tokens for r in rows),
            "cost_usd": sum(r.cost_usd for r in rows),
            "recruit_rate": recruited / len(scored) if scored else None,
            "retrieval_rate": sum(1 for p in used if p > 0) / len(used) if used else None,
            "flags": {k2: v for k2, v in flags.items()}}


def alerts(conds: list[dict[str, Any]], errors: int, max_errors: int | None) -> list[str]:
    """Rates that look broken, one line each: every reply unparsed, a condition that never recruits
    although its slug has r1 (or never retrieves although it has k1), errors past the run's limit."""
    out = []
    for c in conds:
        if c["scored"] >= MIN_FOR_ALERT and c["invalid"] == c["scored"]:
            out.append(f"{c['condition']}: every one of {c['scored']} replies was unparsed (invalid): check the "
                       "prompts and the model's output format")
        if str(c["flags"].get("r")) == "1" and c["scored"] >= MIN_FOR_ALERT and c["recruit_rate"] == 0:
            out.append(f"{c['condition']}: no recruitment in {c['scored']} debates although its slug has r1")
        if str(c["flags"].get("k")) == "1" and c["scored"] >= MIN_FOR_ALERT and c["retrieval_rate"] in (0, None):
            out.append(f"{c['condition']}: no passage retrieved in {c['scored']} debates although its slug has k1")
    if max_errors is not None and errors > max_errors:
        out.append(f"{errors} error rows, above the run's limit of {max_errors} (run.max_errors)")
    return out


class LiveRun:
    """A running run as the live page shows it; thread-safe (the server answers on many threads)."""

    def __init__(self, run_dir: Path, record: RunRecord) -> None:
        self.run_dir = Path(run_dir)
        self.record = record
        self.reader = RowReader(self.run_dir, record)
        self._lock = threading.Lock()
        self._snap: tuple[float, dict[str, Any], list[Row]] | None = None

    def running(self) -> bool:
        """A process holds the run's lock, or (PostgreSQL workers elsewhere) status.json says running."""
        if lock_holder(self.run_dir) is not None:
            return True
        return self.record.storage_url is not None and self._status().get("state") == "running"

    def _status(self) -> dict[str, object]:
        """status.json as the runner last wrote it; {} while it is being replaced or is not there."""
        try:
            doc = json.loads((self.run_dir / "status.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            if self._snap is not None and time.monotonic() - self._snap[0] < FRESH_S:
                return self._snap[1]
            doc, rows = self._build()
            self._snap = (time.monotonic(), doc, rows)
            return doc

    def rows(self) -> list[Row]:
        self.snapshot()
        assert self._snap is not None
        return self._snap[2]

    def _build(self) -> tuple[dict[str, object], list[Row]]:
        timed = self.reader.rows()
        rows = [r for r, _ in timed]
        status = self._status()
        flags = self.record.flags
        by: dict[str, list[Row]] = defaultdict(list)
        for r in rows:
            by[r.condition].append(r)
        order = [c for c in self.record.slugs] + sorted(set(by) - set(self.record.slugs))
        conds = [condition_view(c, by.get(c, []), flags.get(c, {})) for c in order]
        total = self.record.n_pairs
        cost = sum(r.cost_usd for r in rows)
        calls = sum(r.calls for r in rows)
        errors = sum(1 for r in rows if r.error)
        max_errors = (self.record.scenario.get("run") or {}).get("max_errors", 10)
        latest = sorted(timed, key=lambda t: t[1], reverse=True)[:LATEST]
        doc = {
            "name": self.record.name, "running": self.running(), "state": status.get("state", "unknown"),
            "updated": time.strftime("%H:%M:%S"), "done": len(rows), "total": total,
            "calls": calls, "tokens": sum(r.tokens for r in rows), "cost_usd": cost, "errors": errors,
            "invalid": sum(1 for r in rows if r.invalid and not r.error),
            "projected_cost_usd": cost / len(rows) * total if rows and total else None,
            "projected_calls": round(calls / len(rows) * total) if rows and total else None,
            "conditions": conds, "alerts": alerts(conds, errors, max_errors),
            "latest": [{"condition": r.condition, "dataset": r.dataset, "qid": r.qid, "repeat": r.repeat,
                        "status": r.status, "answer": r.answer or "-", "gold": r.gold, "calls": r.calls,
                        "page": f"questions/{page_name(r.dataset, r.qid)}"} for r, _ in latest],
        }
        return doc, rows

    def question(self, name: str) -> str | None:
        """The page of the question whose file name is `name`, built from its finished rows now,
        as the finished report builds it (no leakage marks: the audit runs on the whole run)."""
        rows = self.rows()
        mine = [r for r in rows if page_name(r.dataset, r.qid) == name]
        if not mine:
            return None
        data = RunData(run_dir=self.run_dir, record=self.record, rows=rows,
                       questions=read_questions(self.run_dir), status=self._status())
        digests = {row_key(d.row): d for d in read_digests(self.run_dir, mine, scoring=self.record.scoring)}
        html, _ = question_page(data, mine[0].key, mine, digests, PageContext.of(data, {}, "last"))
        return html

    def close(self) -> None:
        self.reader.close()


class LiveSite:
    """The live view's routes for the server (`server.LiveRoute`): the page at `/` and `index.html`,
    its figures at `live.json`, question pages built on demand. Once the run has stopped, `build`
    (the finished report's builder) runs once on a thread of its own; from then on every path is a
    file of the finished report, and the page, seeing `finished`, opens it."""

    def __init__(self, run_dir: Path, record: RunRecord, build: Callable[[], object], *, poll_ms: int = 2000) -> None:
        self.live = LiveRun(run_dir, record)
        self.build = build
        self.poll_ms = poll_ms
        self.finished = False
        self.failed: str | None = None
        self._started = False
        self._lock = threading.Lock()

    def __call__(self, path: str) -> tuple[int, str, bytes] | None:
        if path == "live.json":  # answered after the end too: a page that polls late still learns of it
            doc = dict(self.live.snapshot())
            if not doc["running"]:
                self._finish()
            doc["finished"] = self.finished
            if self.failed:
                doc["alerts"] = [*doc["alerts"], f"the finished report could not be built: {self.failed}"]
            return json_answer(doc)
        if self.finished:
            return None
        if path == "index.html":
            return 200, "text/html; charset=utf-8", self._page().encode()
        if path.startswith("questions/") and path.count("/") == 1:
            html = self.live.question(path.removeprefix("questions/"))
            if html is None:
                return 404, "text/plain; charset=utf-8", b"No finished pair of this question yet"
            return 200, "text/html; charset=utf-8", html.encode()
        return None

    def _page(self) -> str:
        rows = self.live.rows()
        data = RunData(run_dir=self.live.run_dir, record=self.live.record, rows=rows,
                       questions={}, status=self.live._status())
        header = run_header(data)  # as the page was opened; the live figures below it move on
        header["state"] = f"{header['state']} when the page was opened"
        return environment().get_template("live.html.j2").render(
            nonce=secrets.token_urlsafe(16), run=header, poll_ms=self.poll_ms)

    def _finish(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._build, name="medpanel-view-report", daemon=True).start()

    def _build(self) -> None:
        try:
            self.build()
        except UserError as exc:
            self.failed = str(exc)
            return
        self.finished = True

    def close(self) -> None:
        self.live.close()
