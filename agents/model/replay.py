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

from autogen_core.models import CreateResult, RequestUsage

from medpanel.agents.model.cache import ResponseCache
from medpanel.agents.types import TranscriptEvent, Usage


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

    def answer(self, key: str, tag: Any, halt: type[Exception] = RuntimeError) -> dict[str, Any] | None:
        """The stored reply for `key`, or None (a miss). Strict, a miss stops the run (`on_strict_miss`)
        and raises `halt` (the client's RunHalted: the question in flight is not recorded). `tag`: the
        call's CallTag (role, step), named in the message."""
        stored = self._cache.get(key)
        with self._lock:
            if stored is None:
                self.misses += 1
            else:
                self.hits += 1
        if stored is None and self.strict:
            why = (f"--replay-strict: the {tag.role} call at step {tag.step!r} was never answered in {self.source} "
                   "(its stored responses hold no reply for this exact request: a changed prompt, setting or "
                   "model); drop --replay-strict to send the misses to the model")
            if self.on_strict_miss is not None:
                self.on_strict_miss(why)
            raise halt(why)
        return stored


def replayed(event: TranscriptEvent, stored: dict[str, Any],
             finish: Callable[[TranscriptEvent], None]) -> CreateResult:
    """Fill `event` with the stored reply and its original usage, record it (`finish`), and return the
    result the model gave the source run."""
    pt, ct = stored["prompt_tokens"], stored["completion_tokens"]
    event.content, event.usage = stored["content"], Usage(prompt_tokens=pt, completion_tokens=ct)
    finish(event)
    return CreateResult(finish_reason="stop", content=stored["content"], cached=False,
                        usage=RequestUsage(prompt_tokens=pt, completion_tokens=ct))
