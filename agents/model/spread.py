"""Which of the embedded model's servers gets the next request (agents/model/cores.py starts them).

Kept apart from the servers' launcher: every client imports it, and it needs nothing beyond the
standard library.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

POOL_SEP = ","
"""Joins the servers' base URLs into the one string a session passes around as its base URL."""


def pool_urls(base_url: str) -> list[str]:
    """The servers behind a session's base URL (one for a single server)."""
    return [u for u in base_url.split(POOL_SEP) if u]


class Spread:
    """Which server gets the next request: the one with the fewest in flight, the first on ties.

    One per set of servers and process, shared by every worker's client (workers are threads, each
    with its own event loop), hence the lock; held for a counter update only."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.in_flight = [0] * len(urls)
        self.sent = [0] * len(urls)
        self._lock = threading.Lock()

    @contextmanager
    def take(self) -> Iterator[str]:
        with self._lock:
            i = min(range(len(self.urls)), key=self.in_flight.__getitem__)
            self.in_flight[i] += 1
            self.sent[i] += 1
        try:
            yield self.urls[i]
        finally:
            with self._lock:
                self.in_flight[i] -= 1


_spreads: dict[str, Spread] = {}
_spreads_lock = threading.Lock()


def spread_for(base_url: str) -> Spread | None:
    """The process's one `Spread` over the servers of `base_url`, or None for a single URL."""
    urls = pool_urls(base_url)
    if len(urls) < 2:
        return None
    with _spreads_lock:
        if base_url not in _spreads:
            _spreads[base_url] = Spread(urls)
        return _spreads[base_url]
