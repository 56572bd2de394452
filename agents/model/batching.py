"""`model.batch`: the calls of every question in flight go out together, as Batch API files.

A debate is sequential, but hundreds of debates are in flight at once: each waits on its next
call. `BatchQueue` (one per endpoint and batch settings in a process, shared by every worker
thread and lane) takes each request's body, exactly the bytes a direct call would POST, as one
line of a JSONL file; the file goes out when it holds `max_requests` lines or `max_wait_s` after
its first line came. The queue's own thread then polls the batch every `poll_s`, downloads its
output and error files and hands each line's reply back to the call that waits on it
(`batch_client.BatchChatClient`), which reads it as a direct reply. Everything above the client
(cache, retries, transcripts, budgets) sees an ordinary call, only slower.

Failures are per item. A line in the error file is its status error (a 429, a 500 ...) or, for a
batch that expired, failed or was cancelled before answering it, `BatchUnanswered`: either is
retried by the caller's retries like any failed call, and a retry goes into the next batch.

What a kill must not lose is written to the run directory through a `Journal` (the runner's
confined writer, `experiments/run/execution/batches.py`): `batches/<id>.json` from the moment a batch
exists (its input file is noted before the batch is created), the downloaded replies beside it.
A new queue reads those records first: a batch still running is followed, replies already
downloaded are kept, and a request whose body matches one of their lines (sha-256 of the body)
takes that reply instead of being sent again, so a resume never pays twice for a line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from medpanel.agents.model.batch_api import TERMINAL, BatchAPI
from medpanel.agents.model.batch_lines import ItemReply, Journal, body_sha, jsonl_line, parse_output
from medpanel.agents.model.spec import BatchSpec


@dataclass
class _Item:
    sha: str
    data: bytes
    future: concurrent.futures.Future[ItemReply]


@dataclass
class _Batch:
    """A batch this queue follows: its record and the waiting call of each of its lines."""

    record: dict[str, Any]
    waiting: dict[str, concurrent.futures.Future[ItemReply] | None] = field(default_factory=dict)
    """custom_id -> the call it answers (None: a line recovered from an earlier session, unclaimed)."""

    @property
    def name(self) -> str:
        return f"{self.record.get('batch_id') or self.record['input_file_id']}.json"


class BatchQueue:
    """Collects request bodies from any thread, sends them as batches and hands back each reply."""

    def __init__(self, api: Callable[[], BatchAPI], settings: BatchSpec, *, endpoint: str, tag: str = "",
                 journal: Journal | None = None) -> None:
        self.api_factory = api
        self.settings = settings
        self.endpoint = endpoint
        self.tag = tag
        """Which of a process's queues on this endpoint (its key and settings): a resume's queue takes
        back only its own batches."""
        self.journal = journal
        self._lock = threading.Lock()
        self._waiting: list[_Item] = []
        self._first_at = 0.0
        self._pool: dict[str, list[ItemReply]] = {}
        """Replies downloaded in an earlier session that no call has taken yet, by body sha."""
        self._unclaimed: dict[str, list[tuple[_Batch, str]]] = {}
        """Lines of earlier sessions' batches still running, no call waiting on them yet, by body sha."""
        self._done: list[_Batch] = []
        """Batches whose every line was handed back: recorded as delivered at the next collection."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._started = threading.Event()
        self.submitted = 0
        """Batches this queue created."""
        self._recovered: list[_Batch] = []
        """Earlier sessions' batches still running when they ended: followed once the thread starts."""
        self._kept: dict[str, list[Any]] = {}
        """batch id -> [its batch, its downloaded replies no call has taken yet] (earlier sessions')."""
        if journal is not None:
            self._recover(journal)

    # -- any thread -------------------------------------------------------------------------------

    def submit(self, data: bytes) -> concurrent.futures.Future[ItemReply]:
        """The future reply to the request body `data` (a JSON object's bytes)."""
        sha = body_sha(data)
        future: concurrent.futures.Future[ItemReply] = concurrent.futures.Future()
        with self._lock:
            if self._closing:
                raise RuntimeError("the batch queue is closed")
            kept = self._pool.get(sha)
            if kept:
                reply = kept.pop(0)  # answered by a batch of an earlier session
                future.set_result(reply)
                if not kept:
                    del self._pool[sha]
                self._taken(reply.batch_id)
                return future
            lines = self._unclaimed.get(sha)
            if lines:
                batch, custom_id = lines.pop(0)  # a line of an earlier session's batch, still running
                if not lines:
                    del self._unclaimed[sha]
                batch.waiting[custom_id] = future
                return future
            if not self._waiting:
                self._first_at = time.monotonic()
            self._waiting.append(_Item(sha, data, future))
        self._start()
        self._poke()
        return future

    def _taken(self, batch_id: str) -> None:
        """One more kept reply of an earlier session's batch was handed back (under the lock): once
        all were, the batch is recorded as delivered like any other."""
        kept = self._kept.get(batch_id)
        if kept is not None:
            kept[1] -= 1
            if kept[1] <= 0:
                self._done.append(kept[0])
                del self._kept[batch_id]

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread. Batches still running stay where they are: their records let a resume
        collect them. Calls still waiting (the run is ending) are cancelled."""
        with self._lock:
            self._closing = True
            waiting, self._waiting = self._waiting, []
        for item in waiting:
            item.future.cancel()
        if self._loop is not None and self._thread is not None:
            self._poke()
            self._thread.join(timeout_s)  # its loop records what was delivered as it ends
        else:
            self._record_delivered()  # no thread: only kept replies were handed back

    # -- the queue's thread -----------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="medpanel-batches", daemon=True)
            self._thread.start()
        self._started.wait()

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just ended
                loop.call_soon_threadsafe(wake.set)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._started.set()
        api = self.api_factory()
        tasks: set[asyncio.Task[None]] = set()
        for batch in self._recovered:
            tasks.add(asyncio.ensure_future(self._follow(api, batch)))
        try:
            while not self._closing:
                items, wait = self._due()
                if items:
                    tasks.add(asyncio.ensure_future(self._send(api, items)))
                tasks = {t for t in tasks if not t.done()}
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=wait)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._record_delivered()
            await api.close()

    def _due(self) -> tuple[list[_Item], float]:
        """The requests to send now (a full batch, or all once the oldest has waited max_wait_s)
        and how long to sleep before looking again."""
        s = self.settings
        with self._lock:
            if not self._waiting:
                return [], s.max_wait_s
            age = time.monotonic() - self._first_at
            if len(self._waiting) < s.max_requests and age < s.max_wait_s:
                return [], s.max_wait_s - age
            items, self._waiting = self._waiting[:s.max_requests], self._waiting[s.max_requests:]
            self._first_at = time.monotonic()
            return items, 0.0 if self._waiting and len(self._waiting) >= s.max_requests else s.max_wait_s

    async def _send(self, api: BatchAPI, items: list[_Item]) -> None:
        items = [i for i in items if not i.future.cancelled()]
        if not items:
            return
        ids = [f"{item.sha[:24]}-{n}" for n, item in enumerate(items)]
        data = b"".join(jsonl_line(cid, item.data) for cid, item in zip(ids, items, strict=True))
        batch = _Batch({"endpoint": self.endpoint, "queue": self.tag, "state": "creating", "items": {
            cid: item.sha for cid, item in zip(ids, items, strict=True)}}, dict(zip(ids, (i.future for i in items),
                                                                                 strict=True)))
        try:
            batch.record["input_file_id"] = await api.upload(data, "medpanel-batch.jsonl")
            # Noted before the batch exists: a kill between create and the record still leaves its input file,
            # by which a resume finds the batch (`_find`).
            self._save(batch)
            created = await api.create(batch.record["input_file_id"])
        except asyncio.CancelledError:
            for item in items:
                item.future.cancel()
            raise
        except Exception as exc:
            self._forget(batch)
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc)  # retried by kind, into the next batch
            return
        uploaded = batch.name
        batch.record.update(batch_id=str(created["id"]), state="submitted", status=created.get("status"),
                            submitted_at=time.time())
        self._save(batch)  # under the batch's id first, then the upload's record goes: a kill between keeps one
        self._remove(uploaded)
        self.submitted += 1
        await self._follow(api, batch)

    async def _follow(self, api: BatchAPI, batch: _Batch) -> None:
        """Poll until the batch ends, then collect it (a transport error while polling: poll again)."""
        try:
            await self._poll(api, batch)
        except asyncio.CancelledError:
            with self._lock:  # the session ends: the calls still waiting end with it (unrecorded)
                for future in batch.waiting.values():
                    if future is not None:
                        future.cancel()
            raise

    async def _poll(self, api: BatchAPI, batch: _Batch) -> None:
        if not batch.record.get("batch_id"):
            found = await self._find(api, batch)
            if not found:
                return
        while True:
            try:
                doc = await api.retrieve(batch.record["batch_id"])
            except Exception:
                doc = {}
            if doc.get("status") in TERMINAL:
                break
            await asyncio.sleep(self.settings.poll_s)
        replies: dict[str, ItemReply] = {}
        for key in ("output_file_id", "error_file_id"):
            if doc.get(key):
                replies.update(parse_output(await api.content(str(doc[key])), batch.record["batch_id"]))
        self._collect(batch, str(doc["status"]), replies)

    async def _find(self, api: BatchAPI, batch: _Batch) -> bool:
        """An earlier session uploaded this file and was stopped around `POST /batches`: the batch
        made from it, if one was."""
        try:
            listed = await api.list_batches()
        except Exception:
            return False
        for doc in listed:
            if doc.get("input_file_id") == batch.record["input_file_id"]:
                uploaded = batch.name
                batch.record.update(batch_id=str(doc["id"]), state="submitted")
                self._save(batch)
                self._remove(uploaded)
                return True
        self._forget(batch)
        self._unclaim(batch)
        return False

    def _collect(self, batch: _Batch, status: str, replies: dict[str, ItemReply]) -> None:
        bid = batch.record["batch_id"]
        kept = b"".join(json.dumps({"custom_id": cid, "status": r.status, "error": r.error,
                                    "body": r.body.decode("utf-8", "replace")}).encode() + b"\n"
                        for cid, r in replies.items())
        self._write(f"{bid}.replies.jsonl", kept)
        batch.record.update(state="collected", status=status, collected_at=time.time())
        self._save(batch)
        self._record_delivered()
        missing = f"batch_{status}" if status != "completed" else "batch_failed"
        handed = True
        with self._lock:
            for cid, sha in batch.record["items"].items():
                reply = replies.get(cid) or ItemReply(bid, error=f"{missing}: batch {bid} ended {status} "
                                                      "without answering this request")
                future = batch.waiting.get(cid)
                if future is None:
                    if _answered(reply):  # an earlier session's line no call has asked for yet
                        self._pool.setdefault(sha, []).append(reply)
                        handed = False
                    with contextlib.suppress(ValueError):
                        self._unclaimed.get(sha, []).remove((batch, cid))
                    continue
                if future.cancelled():  # its question was stopped: kept for the call that asks again
                    if _answered(reply):
                        self._pool.setdefault(sha, []).append(reply)
                        handed = False
                    continue
                future.set_result(reply)
        if handed:
            self._done.append(batch)

    def _record_delivered(self) -> None:
        """Batches whose replies were all handed back one collection ago: their calls have been
        recorded (and cached) since, so their replies need not be kept for a resume."""
        done, self._done = self._done, []
        for batch in done:
            batch.record["state"] = "delivered"
            self._save(batch)
            self._remove(f"{batch.record['batch_id']}.replies.jsonl")

    # -- the journal ------------------------------------------------------------------------------

    def _save(self, batch: _Batch) -> None:
        self._write(batch.name, json.dumps(batch.record, indent=1).encode())

    def _forget(self, batch: _Batch) -> None:
        self._remove(batch.name)

    def _write(self, name: str, data: bytes) -> None:
        if self.journal is not None:
            self.journal.save(name, data)

    def _remove(self, name: str) -> None:
        if self.journal is not None:
            self.journal.remove(name)

    def _unclaim(self, batch: _Batch) -> None:
        with self._lock:
            for cid, sha in batch.record["items"].items():
                with contextlib.suppress(ValueError):
                    self._unclaimed.get(sha, []).remove((batch, cid))

    def _recover(self, journal: Journal) -> None:
        """An earlier session's batches on this endpoint: replies downloaded, or batches to follow."""
        recovered: list[_Batch] = []
        records: dict[str, dict[str, Any]] = {}
        for name in journal.names():
            try:
                record = json.loads(journal.read(name) or b"{}") if name.endswith(".json") else None
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("endpoint") == self.endpoint \
                    and record.get("queue", self.tag) == self.tag and isinstance(record.get("items"), dict):
                records[name] = record
        # An upload's record left beside its batch's (a kill between writing one and removing the other).
        created = {r.get("input_file_id") for r in records.values() if r.get("batch_id")}
        for name, record in records.items():
            if record.get("state") == "delivered":
                continue
            if not record.get("batch_id") and record.get("input_file_id") in created:
                journal.remove(name)
                continue
            batch = _Batch(record, {cid: None for cid in record["items"]})
            kept = journal.read(f"{record.get('batch_id')}.replies.jsonl") if record.get("state") == "collected" \
                else None
            if kept is not None:
                count = 0
                for line in kept.splitlines():
                    doc = json.loads(line)
                    sha = record["items"].get(doc.get("custom_id"))
                    reply = ItemReply(record["batch_id"], int(doc.get("status") or 0), str(doc.get("body")).encode(),
                                      doc.get("error"))
                    if sha and _answered(reply):
                        self._pool.setdefault(sha, []).append(reply)
                        count += 1
                if count:
                    self._kept[record["batch_id"]] = [batch, count]
                continue
            for cid, sha in record["items"].items():
                self._unclaimed.setdefault(sha, []).append((batch, cid))
            recovered.append(batch)
        self._recovered = recovered
        if recovered:
            self._start()


def _answered(reply: ItemReply) -> bool:
    """A reply worth keeping for a later call: the endpoint answered the line (a 2xx)."""
    return reply.error is None and 200 <= reply.status < 300
