"""A run's state while it works: the stop flag and its reason, and the tally of finished pairs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from medpanel.agents.types import QuestionResult
from medpanel.experiments.run.store.rows import Row


@dataclass
class Stop:
    """A shared stop flag with the reason the run halted (Ctrl-C, max_errors ...).

    Two strengths: a *drain* (the first Ctrl-C or SIGTERM) starts no new question and lets the
    ones in flight finish and be saved; a *halt* (a budget, max_errors, a systematic failure, the
    drain's grace period running out) also stops the questions in flight at their next model call,
    unrecorded, so a resume runs them again.
    """

    event: threading.Event = field(default_factory=threading.Event)
    halt_event: threading.Event = field(default_factory=threading.Event)
    abort_event: threading.Event = field(default_factory=threading.Event)
    """Set when nothing may wait any longer (the grace period is over, an endpoint asked for a wait
    longer than the run allows): the questions in flight are cancelled at once, mid-call."""
    reason: str | None = None

    def set(self, reason: str, *, drain: bool = False) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()
        if not drain:
            self.halt_event.set()

    def halt(self) -> None:
        self.event.set()
        self.halt_event.set()

    def abort(self, reason: str | None = None) -> None:
        """Halt, and cancel the questions in flight now rather than at their next model call."""
        if reason is not None:
            self.set(reason)
        self.halt()
        self.abort_event.set()

    @property
    def aborted(self) -> bool:
        return self.abort_event.is_set()

    @property
    def is_set(self) -> bool:
        return self.event.is_set()

    @property
    def halted(self) -> bool:
        return self.halt_event.is_set()


@dataclass
class Tally:
    done: int = 0
    correct: int = 0
    invalid: int = 0
    errors: int = 0
    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, row: Row, result: QuestionResult | None = None) -> None:
        with self.lock:
            self.done += 1
            self.correct += row.correct
            self.invalid += row.invalid
            self.errors += bool(row.error)
            self.calls += row.calls
            self.tokens += row.tokens
            self.cost_usd += row.cost_usd
            if result is not None:
                self.cache_hits += sum(1 for e in result.events if e.kind == "call" and e.cache_hit)


ProgressHook = Callable[[Tally, int], None]
