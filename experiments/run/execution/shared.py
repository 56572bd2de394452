"""What every worker of one session (one process) shares: the plan, the store, the stop, the
budgets and the endpoint's health, the tally, and which pairs this process has taken.

The workers (`worker.py`) run lanes over it; the runner (`runner.py`) and a member process
(`processes.py`) build it once a session and read what it counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from medpanel.agents.model.backends import ClientFactory
from medpanel.agents.model.cache import ResponseCache
from medpanel.agents.model.replay import Replay
from medpanel.agents.types import QuestionResult
from medpanel.experiments.run.scenario import axes
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.store.storage import Pair
from medpanel.experiments.run.store.store import Row, Store
from medpanel.experiments.run.tracking.budget import Budget, cache_saving
from medpanel.experiments.run.tracking.health import EndpointHealth, Held
from medpanel.experiments.run.tracking.state import ProgressHook, Stop, Tally


@dataclass
class Shared:
    """What every worker of one session (one process) shares."""

    plan: Plan
    store: Store
    owner: str
    stop: Stop
    budget: Budget
    health: EndpointHealth
    tally: Tally
    timings: dict[str, float]
    started: float
    progress: ProgressHook | None = None
    on_row: Callable[[Row], None] | None = None
    """Called with every committed row (run.tracker's live metrics)."""
    cache: ResponseCache | None = None
    replay: Replay | None = None
    base_url: str | None = None
    client_factory: ClientFactory | None = None
    model_budgets: dict[str, axes.ModelBudget] = field(default_factory=dict)
    """`models:` blocks with their own budget or rate limit, by label."""
    retry_errors: bool = False
    """`--resume --retry-errors`: pairs with error rows run again; each new result replaces its error row."""
    error_pairs: set[Pair] = field(default_factory=set)
    retried: set[Pair] = field(default_factory=set)
    taken: set[Pair] = field(default_factory=set)
    """Pairs this process has finished or claimed: lets helping skip them without a query."""
    pending: list[Pair] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def total(self) -> int:
        return len(self.plan.pairs)

    def count(self, row: Row, result: QuestionResult) -> None:
        """Tally a committed pair, show it, and apply `max_errors` (to error rows, over all sessions)."""
        self.tally.add(row, result)
        pair = (row.condition, row.dataset, row.qid, row.repeat)
        if pair in self.error_pairs:
            self.retried.add(pair)
        if self.progress is not None:
            self.progress(self.tally, self.total)
        if self.on_row is not None:
            self.on_row(row)
        max_errors = self.plan.scenario.run.max_errors
        if row.error and max_errors is not None and self.tally.errors > max_errors:
            self.stop.set(f"max_errors={max_errors} exceeded ({self.tally.errors} questions have error rows); "
                          "fix the cause, then resume (--retry-errors re-runs the error rows, --max-errors "
                          "raises the limit)")

    def release_quietly(self, pair: Pair) -> None:
        """Release a claim; if the storage itself has failed, a resume releases it instead."""
        try:
            self.store.release(pair, self.owner)
        except Exception as exc:
            if self.store.resource_failure(exc) is None:
                raise

    def commit(self, held: Held) -> Row:
        return self.store.commit(held.result, held.question, self.owner, cost_usd=held.cost_usd,
                                 replace_error=held.pair in self.error_pairs,
                                 cache_saved_usd=sum(cache_saving(e, self.budget.prices) for e in held.result.events))

    def settle_held(self) -> None:
        """At the end of a session: record held failures if the endpoint answered, else stop and release them."""
        held = self.health.take_all()
        verdict = self.health.verdict(held)
        if verdict is not None:
            self.stop.set(verdict)
        for h in held:
            if verdict is None:
                try:
                    self.count(self.commit(h), h.result)
                    continue
                except Exception as exc:
                    verdict = self.store.resource_failure(exc)
                    if verdict is None:
                        raise
                    self.stop.set(verdict)
            self.release_quietly(h.pair)

    def model_call(self, label: str | None, spec: Any) -> dict[str, Any]:
        """What a question's calls to one model need: its endpoint and its gate (the run's and its own)."""
        return {"base_url": self.base_url if spec.backend == "local" else None,
                "before_call": axes.gate(self.budget.before_call, self.model_budgets.get(label or ""))}

    def all_taken(self) -> bool:
        with self.lock:
            return all(p in self.taken for p in self.pending)

    def take(self, pair: Pair) -> bool:
        """Mark a pair as this process's; False when it already was."""
        with self.lock:
            if pair in self.taken:
                return False
            self.taken.add(pair)
            return True
