"""Exact replay: answer requests from another run directory's stored responses.

`medpanel run SCENARIO --replay RUN_DIR` opens RUN_DIR's response cache (`RUN_DIR/cache`, every
reply the model gave that run, keyed on everything that determines a reply: model, endpoint,
sampling, response format, messages) read-only. A request it holds is answered with the stored
reply and its original token usage, recorded as an ordinary call (not a cache hit), so a replayed
run writes the same transcripts as the original apart from timestamps and latencies. A request it
does not hold is a miss: counted, and sent to the model (or, strict, the run stops at the first).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medpanel.agents.model.cache import ResponseCache


class ReplayMiss(RuntimeError):
    """A strict replay met a request the source run never answered."""


class Replay:
    def __init__(self, source: Path, *, strict: bool = False) -> None:
        self.source = source
        self.strict = strict
        self.on_strict_miss: Callable[[str], None] | None = None
        """Set by the runner: stops the whole run (the question in flight is not recorded)."""
        self._cache = ResponseCache(source / "cache")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def answer(self, key: str, where: str) -> dict[str, Any] | None:
        """The stored reply for `key`, or None (a miss; strict: `ReplayMiss` naming `where`)."""
        stored = self._cache.get(key)
        with self._lock:
            if stored is None:
                self.misses += 1
            else:
                self.hits += 1
        if stored is None and self.strict:
            raise ReplayMiss(f"--replay-strict: {where} was never answered in {self.source} (its stored responses "
                             "hold no reply for this exact request: a changed prompt, setting or model); drop "
                             "--replay-strict to send the misses to the model")
        return stored
