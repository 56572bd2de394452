"""What one HTTP attempt tells the caller besides its reply: rate-limit headers, cached prompt tokens.

AutoGen's OpenAI client turns a completion into a `CreateResult` that keeps neither the response
headers nor `usage.prompt_tokens_details`. `RecordingClient` opens a `CallProbe` around each
attempt (a context variable, so concurrent calls on one event loop and calls on other threads'
loops never see each other's); the HTTP clients (`lean_chat`, `sdk_http`'s response hook,
`PostedChat`) fill it in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from medpanel.agents.model.limits import RateLimits


@dataclass
class CallProbe:
    limits: RateLimits | None = None
    status: int | None = None
    cached_tokens: int = 0
    """`usage.prompt_tokens_details.cached_tokens` of the reply (0 when the endpoint does not say)."""
    batch: str | None = None
    """The batch whose line answered the call (`model.batch`), else None."""


_current: ContextVar[CallProbe | None] = ContextVar("medpanel_call_probe", default=None)


@contextmanager
def probing(limits: RateLimits | None) -> Iterator[CallProbe]:
    probe = CallProbe(limits)
    token = _current.set(probe)
    try:
        yield probe
    finally:
        _current.reset(token)


def observe(status: int, headers: Mapping[str, str]) -> None:
    """A reply's status and headers (any status) for the call in progress and the process's limits."""
    probe = _current.get()
    if probe is None:
        return
    probe.status = status
    if probe.limits is not None:
        probe.limits.observe(status, headers)


def note_cached(tokens: int) -> None:
    """Record the cached prompt tokens a reply's usage reported."""
    probe = _current.get()
    if probe is not None:
        probe.cached_tokens = tokens


def note_batch(batch_id: str) -> None:
    """Record that a batch (this id) answered the call in progress: it is priced at the batch rate."""
    probe = _current.get()
    if probe is not None:
        probe.batch = batch_id
