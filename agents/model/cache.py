"""A response cache keyed on everything that determines a reply.

AutoGen's `ChatCompletionCache` hashes only the messages, so two models (or two temperatures)
sharing a store would serve each other's answers. This key covers the model, the endpoint, the
sampling parameters, the response format and the messages. In a 2x2 grid the conditions share
their first turn; with temperature 0 those identical requests are answered once.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import diskcache

from medpanel.agents.redact import redact


class StorageFailure(RuntimeError):
    """The run's own files cannot be written (disk full, read-only, no permission).

    Not a failure of the question: `run_question` lets it through, and the runner stops the run
    (resumably) with this message instead of recording an error row."""


def storage_cause(exc: BaseException) -> str:
    """What went wrong, in the operating system's words where SQLite has its own."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    text = str(exc)
    if "disk is full" in text.lower():
        return f"{os.strerror(errno.ENOSPC)} (SQLite: {text})"
    return text


def _failure(path: Path, exc: BaseException) -> StorageFailure:
    return StorageFailure(f"cannot write the response cache {path}: {storage_cause(exc)}")


def cache_key(request: dict[str, object]) -> str:
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """A per-run cache on disk (diskcache: SQLite, safe across threads and processes).

    Conditions run in parallel, so two workers often ask the same first-turn question at the same
    moment; a per-key lock makes the second wait for the first instead of paying twice.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._store = diskcache.Cache(str(path), size_limit=2**34, eviction_policy="none")
        except (OSError, sqlite3.Error) as exc:
            raise _failure(path, exc) from exc
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            value = self._store.get(key)
        except (OSError, sqlite3.Error) as exc:
            raise _failure(self.path, exc) from exc
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, object]) -> None:
        # A reply that echoes a key must not sit in the run directory verbatim.
        try:
            self._store.set(key, {k: redact(v) if isinstance(v, str) else v for k, v in value.items()})
        except (OSError, sqlite3.Error) as exc:
            raise _failure(self.path, exc) from exc

    def size(self) -> int:
        # Not __len__: an empty cache must not be falsy where callers test `if cache`.
        return len(self._store)

    def close(self) -> None:
        self._store.close()
