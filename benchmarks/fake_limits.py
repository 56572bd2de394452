"""A rate-limiting wrapper for the fake server's handlers: RPM and TPM enforced like a provider.

`RateLimited(handler, requests=20, tokens=20_000, window_s=1.0)` admits at most `requests`
requests and `tokens` tokens (the reply's usage total) per fixed window; beyond that it answers 429
with `Retry-After`/`retry-after-ms`. Every answer, 200 or 429, carries OpenAI's headers:
`x-ratelimit-limit-*`, `x-ratelimit-remaining-*` and `x-ratelimit-reset-*` ("20ms", "1s", "6m0s").
Tests shorten the "minute" to a second so a run against it takes seconds.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

Reply = tuple[int, dict[str, str], Any]


def go_duration(seconds: float) -> str:
    """A duration the way OpenAI writes it: "20ms" under a second, else "1s", "6m0s", "1h2m3s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    whole = int(seconds)
    frac = seconds - whole
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    sec = f"{s + frac:.3f}".rstrip("0").rstrip(".") + "s"
    if h:
        return f"{h}h{m}m{sec}"
    return f"{m}m{sec}" if m else sec


class RateLimited:
    """Wraps a handler `(body, n) -> Reply`; counts what it admitted and what it refused."""

    def __init__(self, handler: Callable[[dict[str, Any], int], Reply], *, requests: int | None = None,
                 tokens: int | None = None, window_s: float = 1.0, send_headers: bool = True) -> None:
        self.handler = handler
        self.requests, self.tokens, self.window_s = requests, tokens, window_s
        self.send_headers = send_headers
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self._window = -1
        self._used_requests = 0
        self._used_tokens = 0
        self.admitted = 0
        self.refused = 0
        self.per_window: dict[int, tuple[int, int]] = {}
        """Window index -> (requests, tokens) admitted in it: what a test checks the limits against."""

    def _headers(self, reset: float) -> dict[str, str]:
        if not self.send_headers:
            return {}
        out: dict[str, str] = {}
        for name, limit, used in (("requests", self.requests, self._used_requests),
                                  ("tokens", self.tokens, self._used_tokens)):
            if limit is not None:
                out[f"x-ratelimit-limit-{name}"] = str(limit)
                out[f"x-ratelimit-remaining-{name}"] = str(max(0, limit - used))
                out[f"x-ratelimit-reset-{name}"] = go_duration(reset)
        return out

    def __call__(self, body: dict[str, Any], n: int) -> Reply:
        status, headers, payload = self.handler(body, n)
        usage = payload.get("usage", {}) if isinstance(payload, dict) else {}
        cost = int(usage.get("total_tokens", 0))
        with self.lock:
            elapsed = time.monotonic() - self.started
            window = int(elapsed // self.window_s)
            reset = (window + 1) * self.window_s - elapsed
            if window != self._window:
                self._window, self._used_requests, self._used_tokens = window, 0, 0
            over = ((self.requests is not None and self._used_requests + 1 > self.requests)
                    or (self.tokens is not None and self._used_tokens + cost > self.tokens))
            if over:
                self.refused += 1
                limit_headers = self._headers(reset)
                return 429, {**limit_headers, "retry-after": str(math.ceil(reset)),
                             "retry-after-ms": str(max(1, round(reset * 1000)))}, \
                    {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
            self._used_requests += 1
            self._used_tokens += cost
            self.admitted += 1
            self.per_window[window] = (self._used_requests, self._used_tokens)
            return status, {**headers, **self._headers(reset)}, payload
