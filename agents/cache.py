"""A response cache keyed on everything that determines a reply.

AutoGen's `ChatCompletionCache` hashes only the messages, so two models (or two temperatures)
sharing a store would serve each other's answers. This key covers the model, the endpoint, the
sampling parameters, the response format and the messages. In a 2x2 grid the conditions share
their first turn; with temperature 0 those identical requests are answered once.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import diskcache

from medpanel.agents.redact import redact


def cache_key(request: dict[str, Any]) -> str:
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """A per-run cache on disk (diskcache: SQLite, safe across threads and processes).

    Conditions run in parallel, so two workers often ask the same first-turn question at the same
    moment; a per-key lock makes the second wait for the first instead of paying twice.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store = diskcache.Cache(str(path), size_limit=2**34, eviction_policy="none")
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, key: str) -> dict[str, Any] | None:
        value = self._store.get(key)
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        # A reply that echoes a key must not sit in the run directory verbatim.
        self._store.set(key, {k: redact(v) if isinstance(v, str) else v for k, v in value.items()})

    def size(self) -> int:
        # Not __len__: an empty cache must not be falsy where callers test `if cache`.
        return len(self._store)

    def close(self) -> None:
        self._store.close()
