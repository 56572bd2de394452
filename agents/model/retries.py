"""How a failed model call is classified, described and retried.

`error_kind` groups failures for the run summary and decides what is retried; `BackoffWait` is the
wait between attempts (exponential, capped, or the endpoint's `Retry-After`); `with_retries` makes
the first attempt without tenacity (most calls need only one) and hands a retryable failure over to
`retried`, which runs the attempt again under tenacity.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from medpanel.agents.model.endpoint_errors import endpoint_message, is_context_overflow, loaded
from medpanel.agents.model.errors import BatchUnanswered
from medpanel.agents.model.limits import RequestOverLimit, retry_after

T = TypeVar("T")


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, BatchUnanswered):
        return exc.kind
    # The SDK's classes and httpx's are read only where those modules are loaded: an exception of
    # theirs cannot exist otherwise, and a run that never needs them never imports them.
    openai, httpx = loaded("openai"), loaded("httpx")
    if openai is not None and isinstance(exc, openai.RateLimitError):
        return "rate_limit"
    if isinstance(exc, asyncio.TimeoutError) or (openai is not None and isinstance(exc, openai.APITimeoutError)) \
            or (httpx is not None and isinstance(exc, httpx.TimeoutException)):
        return "timeout"
    if (openai is not None and isinstance(exc, openai.APIConnectionError)) \
            or (httpx is not None and isinstance(exc, httpx.TransportError)):
        return "connection"
    if openai is not None and isinstance(exc, openai.InternalServerError):
        return "server_error"
    if isinstance(exc, RequestOverLimit):
        return "over_limit"  # not retryable: the same request is as large the next time
    if openai is not None and isinstance(exc, openai.APIStatusError) and 300 <= exc.status_code < 400:
        return "redirect"  # never followed, nor retried: the next answer redirects the same way
    if is_context_overflow(exc):
        return "context_length"  # not retryable: the same prompt is as long the next time
    if openai is not None and isinstance(exc, openai.APIStatusError):
        return "server_error" if exc.status_code >= 500 else f"http_{exc.status_code}"
    if isinstance(exc, ValueError | IndexError | KeyError | TypeError | AttributeError):
        return "bad_response"  # truncated JSON, empty choices: the client cannot build a result
    return type(exc).__name__


def describe_error(exc: BaseException) -> str:
    """The exception's text, plus its root cause when the text alone says nothing.

    The openai SDK reports a refused connection as "Connection error."; the reason (`[Errno 111]
    Connection refused`, a DNS failure) is in its `__cause__` chain.
    """
    # An endpoint's own message, not the SDK's dump of its error body.
    text = endpoint_message(exc) or str(exc)
    root: BaseException = exc
    seen = {id(exc)}
    # An exception raised `from None` hides its context on purpose (the SDK's status errors hide
    # httpx's, which repeats the request's URL and the redirect's whole location).
    while (nxt := root.__cause__ or (None if root.__suppress_context__ else root.__context__)) is not None \
            and id(nxt) not in seen:
        seen.add(id(nxt))
        root = nxt
    if root is not exc:
        cause = str(root) or type(root).__name__
        if isinstance(root, OSError) and root.errno and os.strerror(root.errno) not in cause:
            cause = f"{os.strerror(root.errno)}: {cause}"  # asyncio says "Connect call failed" for a refusal
        if cause not in text:
            text = f"{text} ({cause})"
    return text


_RETRYABLE = {"rate_limit", "timeout", "connection", "server_error", "bad_response", "http_408", "http_409",
              "batch_expired", "batch_failed", "batch_cancelled"}


def is_retryable(exc: BaseException) -> bool:
    return error_kind(exc) in _RETRYABLE


def retry_after_of(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (429/503 `Retry-After`, `retry-after-ms`), if it said."""
    response = getattr(exc, "response", None)
    return retry_after(response.headers) if response is not None else None


@dataclass
class BackoffWait:
    """Exponential backoff with a cap, overridden by the server's Retry-After when it sends one."""

    initial: float = 0.5
    cap: float = 30.0
    before: int = 0
    """Attempts made before tenacity took over (the first goes without it: `with_retries`)."""

    def delay(self, exc: BaseException | None, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based, over the whole call)."""
        asked = retry_after_of(exc) if exc else None
        if asked is not None:
            return min(asked, self.cap)
        return min(self.initial * 2.0 ** (attempt - 1), self.cap)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self.delay(exc, state.attempt_number + self.before)


async def with_retries(once: Callable[[], Awaitable[T]], retries: int) -> T:
    """`once`, then up to `retries` more times while it fails with a retryable error.

    Most calls succeed at once: the first attempt goes without tenacity, whose per-attempt
    machinery cost a quarter of a millisecond of CPU a call; a retryable failure hands over to it.
    """
    try:
        return await once()
    except Exception as first:
        if retries < 1 or not is_retryable(first):
            raise
        wait = BackoffWait(before=1)
        await asyncio.sleep(wait.delay(first, 1))
    return await retried(once, retries, wait)


async def retried(once: Callable[[], Awaitable[T]], retries: int, wait: BackoffWait) -> T:
    """`once` again, up to `retries` times, while it fails with a retryable error (the last raised)."""
    retrying = AsyncRetrying(stop=stop_after_attempt(retries), wait=wait, retry=retry_if_exception(is_retryable),
                             reraise=True)
    async for attempt in retrying:
        with attempt:
            return await once()
    raise AssertionError("unreachable: tenacity reraises the last failure")
