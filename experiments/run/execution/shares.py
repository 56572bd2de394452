"""Dividing a run's limits among the processes of one machine (`run.processes`).

Each process enforces its own limits and none asks another before a call (that would put a round
trip before every request), so the run's limits are handed out as shares: process `i` of `n` gets
`1/n` of every rate (requests and tokens per minute, the run's and each model's), and `1/n` of
what is left of every budget (calls, tokens, dollars, error rows) when it starts its session.
Integer shares add up to exactly the whole: the first `total % n` processes get one more. The
processes together therefore never exceed a limit by more than a single process could.
"""

from __future__ import annotations

from collections.abc import Iterable

from medpanel.agents.model.limits import RateLimiter
from medpanel.experiments.run.tracking.budget import Budget


def split(total: int, n: int, index: int) -> int:
    """Process `index`'s share of `total` among `n`: the shares of 0..n-1 add up to `total`."""
    if n < 1 or not 0 <= index < n:
        raise ValueError(f"process {index} of {n}")
    return total // n + (1 if index < total % n else 0)


def _left(limit: int, spent: int, n: int, index: int) -> int:
    """The limit one process applies: what was spent before, plus its share of what is left."""
    return spent + split(max(limit - spent, 0), n, index)


def rate(per_minute: float | None, n: int) -> float | None:
    """One process's share of a rate (`None`: no limit stays no limit)."""
    return None if per_minute is None else per_minute / n


def error_share(max_errors: int | None, prior_errors: int, n: int, index: int) -> int | None:
    """The `max_errors` one process applies to the error rows it counts (earlier sessions' included):
    the earlier ones plus its share of those still allowed."""
    if max_errors is None:
        return None
    return _left(max_errors, prior_errors, n, index)


def share_budget(budget: Budget, n: int, index: int) -> None:
    """Cut a budget, whose `spend` holds the earlier sessions' spend, to this process's share of what
    is left. Wall time is each process's own and is not divided."""
    s = budget.spend
    if budget.max_calls is not None:
        budget.max_calls = _left(budget.max_calls, s.calls, n, index)
    if budget.max_tokens is not None:
        budget.max_tokens = _left(budget.max_tokens, s.tokens, n, index)
    if budget.max_cost_usd is not None:
        budget.max_cost_usd = s.cost_usd + max(budget.max_cost_usd - s.cost_usd, 0.0) / n


def share_model_rates(budgets: Iterable[Budget], n: int) -> None:
    """Each `models:` block's own request rate, divided (its limiter is a plain `RateLimiter`)."""
    for b in budgets:
        if isinstance(b.limiter, RateLimiter) and b.limiter.rpm is not None:
            b.limiter = RateLimiter(b.limiter.rpm / n)


def take(budget: Budget, model_budgets: Iterable[Budget], max_errors: int | None, prior_errors: int, n: int,
         index: int, *, counts_prior: bool) -> int | None:
    """Cut the budgets (their `spend` holding earlier sessions') to process `index`'s share, and return
    the `max_errors` it applies: to its tally, which holds the earlier sessions' error rows when
    `counts_prior` (the runner) and only its own otherwise (a child)."""
    for b in (budget, *model_budgets):
        share_budget(b, n, index)
    share = error_share(max_errors, prior_errors, n, index)
    return share if share is None or counts_prior else share - prior_errors
