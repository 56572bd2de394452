"""`BatchChatClient`: a call that goes out as one line of a batch and reads its line's reply.

The body is built exactly as `LeanChatClient` builds it (`payload`: one method for both), so a
batch line's `body` is byte for byte what a direct call would POST; the reply is read by the same
code (`LeanChatClient.result`), under the same bounds, into the same `CreateResult` or the same
SDK exception. `RecordingClient` sees `batched` and leaves out what belongs to direct calls only:
the per-minute limits (a batch has its own quota) and the per-call deadline (a batch answers
within its completion window).

The queues of a process (`queue_for`) are shared by every client of the same endpoint and batch
settings; the runner gives them the run directory's journal (`open_session`) and closes them at
the end of a session (`close_session`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from typing import Any

from autogen_core.models import CreateResult

from medpanel.agents.model.batch_api import BatchAPI
from medpanel.agents.model.batch_lines import Journal
from medpanel.agents.model.batching import BatchQueue
from medpanel.agents.model.errors import BatchUnanswered
from medpanel.agents.model.lean_chat import LeanChatClient
from medpanel.agents.model.probe import note_batch
from medpanel.agents.model.reply_bounds import ReplyMeter
from medpanel.agents.model.spec import BatchSpec

_queues: dict[str, BatchQueue] = {}
_lock = threading.Lock()
_journal: Journal | None = None


def open_session(journal: Journal | None) -> None:
    """Where this process's queues keep their batch records from now on (a run directory's)."""
    global _journal
    close_session()
    _journal = journal


def close_session() -> None:
    """Close every queue: batches still running stay recorded for the next session."""
    with _lock:
        queues = list(_queues.values())
        _queues.clear()
    for q in queues:
        q.close()


def queue_for(client: LeanChatClient, settings: BatchSpec) -> BatchQueue:
    """The process's queue for this endpoint and these batch settings (the key, by name of its
    variable, is part of the endpoint: two keys are two accounts, two quotas)."""
    endpoint = client.url.removesuffix("/chat/completions")
    key = json.dumps([endpoint, client.headers.get("Authorization", "")[-8:], settings.model_dump()])
    # What the records name the queue by: its endpoint and settings, nothing of the key.
    tag = hashlib.sha256(json.dumps([endpoint, settings.model_dump()]).encode()).hexdigest()[:16]
    with _lock:
        queue = _queues.get(key)
        if queue is None:
            headers, ssl, timeout_s = dict(client.headers), client.ssl, client.timeout_s
            queue = _queues[key] = BatchQueue(
                lambda: BatchAPI(base_url=endpoint, headers=headers, timeout_s=timeout_s, ssl=ssl),
                settings, endpoint=endpoint, tag=tag, journal=_journal)
        return queue


class BatchChatClient(LeanChatClient):
    """`send` = one line of the next batch to `<base_url>/batches`, awaited until it is answered."""

    batched = True

    def __init__(self, *, batch: BatchSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch = batch

    async def send(self, data: bytes) -> CreateResult:
        reply = await asyncio.wrap_future(queue_for(self, self.batch).submit(data))
        note_batch(reply.batch_id)
        if reply.error is not None:
            raise BatchUnanswered(reply.error)
        ReplyMeter(self.max_reply_bytes).add(reply.body)  # a line's reply under a direct reply's bounds
        return self.result(reply.status, {}, reply.body)
