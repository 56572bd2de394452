"""A batch's lines and their replies: the JSONL line a request becomes, the reply each line of an
output or error file holds, and the journal a queue keeps its batches' records in.

A line's `body` is inserted as the bytes a direct call would POST (`jsonl_line`), never decoded
and encoded again, so the request a batch carries is byte for byte the direct one. A reply is
matched to its call by `custom_id`, and to a call of a later session (a resume) by the sha-256
of the body (`body_sha`), which a record keeps for each of its lines.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Protocol

from medpanel.agents.model.batch_api import BATCH_ENDPOINT


class Journal(Protocol):
    """Where a queue keeps its batches' records (a run directory's `batches/` folder)."""

    def save(self, name: str, data: bytes) -> None: ...

    def read(self, name: str) -> bytes | None: ...

    def names(self) -> list[str]: ...

    def remove(self, name: str) -> None: ...


@dataclass(frozen=True)
class ItemReply:
    """One line's answer: its HTTP status and body, or `error` when the batch never answered it."""

    batch_id: str
    status: int = 0
    body: bytes = b""
    error: str | None = None
    """`batch_expired`, `batch_failed`, `batch_cancelled` or the endpoint's code for the line."""


def body_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def jsonl_line(custom_id: str, data: bytes) -> bytes:
    """One request line. The body is inserted as the bytes a direct call would POST, not re-encoded."""
    head = json.dumps({"custom_id": custom_id, "method": "POST", "url": BATCH_ENDPOINT})[:-1]
    return head.encode() + b', "body": ' + data + b"}\n"


def parse_output(raw: bytes, batch_id: str) -> dict[str, ItemReply]:
    """An output or error file: custom_id -> its reply (lines that cannot be read are skipped: their
    calls are answered `batch_failed` and retried)."""
    out: dict[str, ItemReply] = {}
    for line in raw.splitlines():
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("custom_id"), str):
            continue
        response, error = doc.get("response"), doc.get("error")
        if isinstance(response, dict) and isinstance(response.get("status_code"), int):
            body = response.get("body")
            data = body.encode() if isinstance(body, str) else json.dumps(body, ensure_ascii=False).encode()
            out[doc["custom_id"]] = ItemReply(batch_id, int(response["status_code"]), data)
        else:
            code = error.get("code") if isinstance(error, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            out[doc["custom_id"]] = ItemReply(batch_id, error=f"{code or 'batch_failed'}: {message or 'no answer'}")
    return out
