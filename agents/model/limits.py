"""Request and token rate limits shared by every worker of a process, steered by the endpoint's headers.

Providers enforce requests per minute (RPM) and tokens per minute (TPM) per key, and OpenAI-style
servers say on every response how much is left (`x-ratelimit-remaining-requests`/`-tokens`) and
when it refills (`x-ratelimit-reset-requests`/`-tokens`, written like "1s", "6m0s", "20ms").
`RateLimits` paces requests at the configured rates (a request goes when both schedules allow it,
so no window ever holds more than the rate plus one request) and, from the headers, holds new
requests until the reset once the server's own count says the next one would be refused: it slows
down before the limit, not after. A 429 holds every worker until its `Retry-After`, not only the
one that got it.

Tokens are estimated before a request is sent (its prompt, plus `max_tokens`: what an endpoint
reserves for the reply) and the estimate is corrected with the reply's `usage` once it is known.

What a server reports is bounded before it moves anything: a wait or reset beyond `ABSURD_WAIT_S`
(or not a finite number) is read as no figure at all, a count beyond `MAX_COUNT` as that bound, a
reply's usage moves the token schedule by at most one window, and no request is held longer than
`max_wait_s` (longer, `on_long_wait` is told: the runner stops the run, resumably). A request larger
than the token rate itself could never go: it is refused (`RequestOverLimit`) instead of scheduling
the next request hours away.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from medpanel.agents.model.tokens import estimate_tokens

ABSURD_WAIT_S = 7 * 86400.0
"""A wait or reset a server reports beyond a week is a broken header, not a schedule: it is ignored."""

MAX_COUNT = 10**15
"""A remaining-requests or -tokens count is read within plus or minus this (a float beyond an int's
range, `1e400`, would otherwise raise)."""

DEFAULT_MAX_WAIT_S = 300.0
"""The longest hold when none is configured (`run.max_retry_wait_s`'s default)."""

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")


def _seconds(value: float) -> float | None:
    """A reported wait as it may be used: not below 0, and None when not finite or absurdly long."""
    if not math.isfinite(value) or value > ABSURD_WAIT_S:
        return None
    return max(0.0, value)


def parse_duration(text: str | None) -> float | None:
    """Seconds in an OpenAI reset header ("1s", "6m0s", "20ms", "1h2m3.5s") or a bare number of seconds."""
    if text is None:
        return None
    text = text.strip().lower()
    if not text or len(text) > 64:
        return None
    try:
        return _seconds(float(text))
    except ValueError:
        pass
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return _seconds(sum(float(n) * _UNITS[u] for n, u in parts))


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a 429/503 asked the client to wait: `retry-after-ms`, else `Retry-After` (seconds or a date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return _seconds(float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return _seconds(float(value))
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, OverflowError):
            return None
        return _seconds(parsed.timestamp() - time.time())


def _int(value: str | None) -> int | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return int(min(max(number, -MAX_COUNT), MAX_COUNT)) if math.isfinite(number) else None


def request_tokens(messages: Sequence[Mapping[str, object]], max_tokens: int) -> int:
    """What a request may count against a TPM limit before its usage is known: the prompt's estimate
    plus `max_tokens` (OpenAI reserves the reply's room when it admits a request)."""
    return sum(estimate_tokens(str(m.get("content", ""))) for m in messages) + max_tokens


class RequestOverLimit(RuntimeError):
    """A request larger than the token rate: it could never go (kind `over_limit`, not retried)."""


@dataclass
class Ticket:
    """One admitted request: what it was charged, so `settle` can correct the estimate."""

    tokens: int


@dataclass
class LimitStats:
    requests: int = 0
    """Requests admitted (every attempt, retries included)."""
    rate_limited: int = 0
    """429 answers seen."""
    waited_s: float = 0.0
    """Time requests spent waiting for a slot, summed over requests."""
    held_by_headers: int = 0
    """Requests held until a reset because the server's remaining count was spent."""


class RateLimits:
    """RPM and TPM for one process: every worker thread and event loop shares one instance.

    `window_s` is the length of the "minute" the rates are per; only tests shorten it.
    """

    def __init__(self, rpm: float | None = None, tpm: float | None = None, *, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, max_wait_s: float | None = DEFAULT_MAX_WAIT_S,
                 on_long_wait: Callable[[float], None] | None = None,
                 tpm_setting: str = "the tokens-per-minute limit") -> None:
        self.rpm, self.tpm, self.window_s = rpm, tpm, window_s
        self.max_wait_s = max_wait_s
        """The longest wait a server may ask for; a longer one is not waited out: `on_long_wait(seconds)`
        is told (the runner stops the run, resumably) and requests are held only this long."""
        self.on_long_wait = on_long_wait
        self.tpm_setting = tpm_setting
        """What the token rate is called where it is set, for the error of a request it cannot fit."""
        self._req_rate = rpm / window_s if rpm else None
        self._tok_rate = tpm / window_s if tpm else None
        self._clock = clock
        self._lock = threading.Lock()
        # Theoretical arrival times (GCRA): the next request may go at max(req_tat, tok_tat).
        self._req_tat = 0.0
        self._tok_tat = 0.0
        self._hold_until = 0.0
        self._strikes = 0
        # The server's own count, valid until its reset.
        self._srv_req: tuple[int, float] | None = None
        self._srv_tok: tuple[int, float] | None = None
        self._inflight = 0
        self.stats = LimitStats()

    # -- before and after a request ------------------------------------------------------------

    def _ready_at(self, tokens: int, now: float) -> tuple[float, bool]:
        at = max(now, self._hold_until, self._req_tat, self._tok_tat)
        by_headers = False
        if self._srv_req is not None:
            left, reset_at = self._srv_req
            if reset_at <= now:
                self._srv_req = None
            elif left <= 0:
                self._srv_req = left, (reset_at := self._held_to(reset_at, now))
                at, by_headers = max(at, reset_at), True
        if self._srv_tok is not None:
            left, reset_at = self._srv_tok
            if reset_at <= now:
                self._srv_tok = None
            elif left < tokens:
                self._srv_tok = left, (reset_at := self._held_to(reset_at, now))
                at, by_headers = max(at, reset_at), True
        return at, by_headers

    def _held_to(self, reset_at: float, now: float) -> float:
        """A server count's reset as a hold: at most `max_wait_s` away (longer, `on_long_wait` is told)."""
        return now + self._capped(reset_at - now)

    def _admit(self, tokens: int, now: float) -> Ticket:
        if self._req_rate:
            self._req_tat = max(self._req_tat, now) + 1.0 / self._req_rate
        if self._tok_rate:
            self._tok_tat = max(self._tok_tat, now) + tokens / self._tok_rate
        if self._srv_req is not None:
            self._srv_req = (self._srv_req[0] - 1, self._srv_req[1])
        if self._srv_tok is not None:
            self._srv_tok = (self._srv_tok[0] - tokens, self._srv_tok[1])
        self._inflight += 1
        self.stats.requests += 1
        return Ticket(tokens)

    async def acquire(self, tokens: int = 0) -> Ticket:
        """Wait until a request of about `tokens` tokens may go, and charge it."""
        if self.tpm is not None and tokens > self.tpm:
            raise RequestOverLimit(
                f"a request of about {tokens:,} tokens (its prompt and model.max_tokens, which it reserves) can "
                f"never fit {self.tpm_setting} ({self.tpm:,.0f} tokens a {self.window_s:g} s window); raise it "
                "above the request, or lower model.max_tokens")
        held = False
        start = self._clock()
        while True:
            with self._lock:
                now = self._clock()
                at, by_headers = self._ready_at(tokens, now)
                if at <= now:
                    if held:
                        self.stats.held_by_headers += 1
                    self.stats.waited_s += now - start
                    return self._admit(tokens, now)
                held = held or by_headers
            # Re-checked after the wait: a reply may have given tokens back or a 429 may have held all.
            await asyncio.sleep(at - now)

    def settle(self, ticket: Ticket, used: int | None) -> None:
        """The request is over; `used` is its usage's total tokens (None when it failed)."""
        with self._lock:
            self._inflight = max(0, self._inflight - 1)
            if used is None:
                return  # a refused or failed request may still have been counted: keep the charge
            if self.tpm is not None:
                used = min(used, int(self.tpm))  # one reply's figure moves the schedule one window at most
            delta = used - ticket.tokens
            if self._tok_rate:
                self._tok_tat += delta / self._tok_rate
            if self._srv_tok is not None:
                self._srv_tok = (self._srv_tok[0] - delta, self._srv_tok[1])

    # -- what the server says -------------------------------------------------------------------

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Read the rate-limit headers of a response (any status); a 429 holds every request."""
        with self._lock:
            now = self._clock()
            # Requests sent since the server counted this one may be counted already: assume so.
            others = max(0, self._inflight - 1)
            for name, slot in (("requests", "_srv_req"), ("tokens", "_srv_tok")):
                left = _int(headers.get(f"x-ratelimit-remaining-{name}"))
                reset = parse_duration(headers.get(f"x-ratelimit-reset-{name}"))
                if left is not None and reset is not None:
                    spent = others if name == "requests" else 0
                    if left - spent <= 0:
                        reset = self._capped(reset)
                    setattr(self, slot, (left - spent, now + reset))
            if status == 429:
                self.stats.rate_limited += 1
                self._strikes += 1
                wait = retry_after(headers)
                if wait is None:
                    resets = [parse_duration(headers.get(f"x-ratelimit-reset-{n}")) for n in ("requests", "tokens")]
                    known = [r for r in resets if r is not None]
                    wait = max(known) if known else min(0.5 * 2 ** (self._strikes - 1), 30.0)
                self._hold_until = max(self._hold_until, now + self._capped(wait))
            elif 200 <= status < 300:
                self._strikes = 0


    def _capped(self, wait: float) -> float:
        """`wait`, or `max_wait_s` when the server asked for longer (and `on_long_wait` is told)."""
        if self.max_wait_s is None or wait <= self.max_wait_s:  # `wait` is finite: `_seconds` read it
            return wait
        if self.on_long_wait is not None:
            self.on_long_wait(wait)
        return self.max_wait_s


class RateLimiter(RateLimits):
    """Requests per minute only (the limiter before tokens were counted)."""

    def __init__(self, per_minute: float) -> None:
        super().__init__(rpm=per_minute)
