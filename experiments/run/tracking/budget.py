"""Budgets and halt controls: calls, tokens, dollars, errors and wall time, plus a shared rate limit.

Spend is counted from every request that reaches the model (cache hits are free). When a budget is
spent the run's stop flag is set with the reason; questions in flight stop at their next model
call without being recorded, so `medpanel run --resume RUN_DIR --max-calls <higher>` finishes them
(their earlier calls come back from the response cache at no cost).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from medpanel.agents.model.halted import RunHalted
from medpanel.agents.model.limits import RateLimiter, RateLimits
from medpanel.agents.types import TranscriptEvent
from medpanel.experiments.run.tracking.prices import BATCH_DISCOUNT, Price
from medpanel.experiments.run.tracking.state import Stop

__all__ = ["BATCH_DISCOUNT", "Budget", "Price", "RateLimiter", "RateLimits", "Spend", "batch_saving", "cache_saving",
           "event_cost"]


def event_cost(event: TranscriptEvent, prices: dict[str, Price], *, as_sent: bool = True) -> float:
    """A call's dollars: at the batch price when a batch answered it (`as_sent`), else the listed one."""
    price = prices.get(event.model)
    if price is None or event.cache_hit:
        return 0.0
    u = event.usage
    cached = min(u.cached_tokens, u.prompt_tokens)
    p_in, p_cached, p_out = price.rates(as_sent and bool(event.data.get("batch")))
    return ((u.prompt_tokens - cached) * p_in + cached * p_cached + u.completion_tokens * p_out) / 1e6


def batch_saving(event: TranscriptEvent, prices: dict[str, Price]) -> float:
    """Dollars a batch saved on this call: its price sent directly less its price in the batch."""
    if not event.data.get("batch"):
        return 0.0
    return event_cost(event, prices, as_sent=False) - event_cost(event, prices)


def cache_saving(event: TranscriptEvent, prices: dict[str, Price]) -> float:
    """Dollars the endpoint's prompt cache saved on this call: its cached tokens at input less cached rate."""
    price = prices.get(event.model)
    if price is None or event.cache_hit:
        return 0.0
    return min(event.usage.cached_tokens, event.usage.prompt_tokens) * (price.input - price.cached_rate) / 1e6


@dataclass
class Spend:
    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class Budget:
    """Watches spend against the run's limits and halts the run when one is reached."""

    stop: Stop
    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_wall_s: float | None = None
    prices: dict[str, Price] = field(default_factory=dict)
    limiter: RateLimits | None = None
    """The process's RPM/TPM limits: `RecordingClient` waits on them before every attempt."""
    spend: Spend = field(default_factory=Spend)
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_prior(self, calls: int, tokens: int, cost_usd: float) -> None:
        """Spend recorded by earlier sessions of this run counts against the same budget."""
        with self._lock:
            self.spend.calls += calls
            self.spend.tokens += tokens
            self.spend.cost_usd += cost_usd
        self.check()

    def on_event(self, event: TranscriptEvent) -> None:
        if event.kind != "call" or event.cache_hit:
            return
        with self._lock:
            self.spend.calls += event.attempts
            self.spend.tokens += event.usage.total
            self.spend.cost_usd += event_cost(event, self.prices)
        self.check()

    def check(self) -> None:
        s = self.spend
        if self.max_calls is not None and s.calls >= self.max_calls:
            self._halt(f"max_calls={self.max_calls} reached ({s.calls} calls)", "--max-calls")
        elif self.max_tokens is not None and s.tokens >= self.max_tokens:
            self._halt(f"max_tokens={self.max_tokens} reached ({s.tokens} tokens)", "--max-tokens")
        elif self.max_cost_usd is not None and s.cost_usd >= self.max_cost_usd:
            self._halt(f"max_cost_usd={self.max_cost_usd} reached (${s.cost_usd:.4f})", "--max-cost-usd")
        elif self.max_wall_s is not None and time.monotonic() - self.started >= self.max_wall_s:
            self._halt(f"max_wall_s={self.max_wall_s} reached", "--max-wall-s")

    def _halt(self, why: str, flag: str) -> None:
        self.stop.set(f"budget: {why}; resume with a higher {flag}")

    async def before_call(self) -> None:
        self.check()
        if self.stop.halted:  # a drain (Ctrl-C) lets questions in flight finish
            raise RunHalted(self.stop.reason or "run halted")
