"""Cost per mechanism: calls, tokens and dollars per condition x role x step, cache hits apart.

Every model call is a transcript event with its role (specialist, challenger, knowledge_gate,
curator, recruiter, moderator, verifier ...), its step (initial, critique, gate, recruit_check
...), its usage, model and whether the response cache answered it. Orchestration calls are
therefore as visible as the specialists' own: each gets its line.

Counting follows the run's own budget (experiments/run/tracking/budget.py): a call sent costs its attempts
(re-asks and retried errors included) and is priced from its usage at the model's $ per million
tokens; a cache hit sends nothing and costs nothing, so it is counted on its own columns, with the
dollars it would have cost (`usd_saved`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from medpanel.experiments.analysis.quick_init import quick_init

__all__ = ["CallCost", "LedgerLine", "PriceLike", "compact_ledger", "condition_totals", "ledger", "ledger_from_compact",
           "rates_of", "usd_per_extra_correct", "usd_per_extra_correct_rows"]


class PriceLike(Protocol):
    """US dollars per million tokens (experiments.run.budget.Price has this shape)."""

    input: float
    output: float


@dataclass
class LedgerLine:
    condition: str
    role: str
    step: str
    calls: int = 0
    """Requests sent to the model (attempts of calls the cache did not answer)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    cache_hits: int = 0
    cache_prompt_tokens: int = 0
    cache_completion_tokens: int = 0
    usd_saved: float = 0.0
    failed: int = 0
    """Calls that ended in an error (still counted and priced above)."""
    unpriced: int = 0
    """Calls sent to a model with no price (counted at $0)."""
    batch_calls: int = 0
    """Requests a batch answered (`model.batch`), priced at the batch price (in `usd`)."""
    usd_saved_by_batch: float = 0.0
    """What those would have cost more sent one by one, at the listed price."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_row(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"tokens": self.tokens}


def _get(event: Any, name: str, default: Any = None) -> Any:
    if isinstance(event, dict | Mapping):  # dict first: a report reads millions, and the ABC check is slow
        return event.get(name, default)
    return getattr(event, name, default)


def _usage(event: Any) -> tuple[int, int]:
    u = _get(event, "usage") or {}
    return int(_get(u, "prompt_tokens", 0) or 0), int(_get(u, "completion_tokens", 0) or 0)


@quick_init  # one per model call a report keeps: 110,000 on a full-protocol run
@dataclass(frozen=True, slots=True)
class CallCost:
    """One model call as the ledger counts it (what a report keeps of each call event)."""

    role: str
    step: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_hit: bool
    attempts: int
    """Requests behind the call (a re-ask or a retried transport error adds one)."""
    failed: bool
    """The call ended in an error."""
    batch: bool = False
    """A batch answered it (the event's `data.batch`): priced at the batch price."""

    @classmethod
    def of(cls, event: Any) -> CallCost | None:
        """A call event (a TranscriptEvent or its JSON dict) as its cost; None for any other event."""
        get: Callable[..., Any] = event.get if isinstance(event, dict) else functools.partial(_get, event)
        if get("kind") != "call":
            return None
        pt, ct = _usage(event)
        data = get("data")
        return cls(str(get("role", "")), str(get("step", "")), str(get("model", "")), pt, ct,
                   bool(get("cache_hit", False)), int(get("attempts", 1) or 0), bool(get("error")),
                   bool(isinstance(data, dict) and data.get("batch")))


def rates_of(price: PriceLike, batch: bool) -> tuple[float, float]:
    """$ per million (prompt, completion) tokens; a batch call's from the price's own `rates`
    (experiments.run.budget.Price: half of the listed price unless the scenario says)."""
    rates = getattr(price, "rates", None)
    if rates is None:
        return (price.input / 2, price.output / 2) if batch else (price.input, price.output)
    p_in, _, p_out = rates(batch)
    return float(p_in), float(p_out)


def ledger(events: Mapping[str, Iterable[object]], prices: Mapping[str, PriceLike]) -> list[LedgerLine]:
    """Condition -> its calls (`CallCost`s, or transcript events: TranscriptEvent objects or their
    JSON dicts) -> one line per (condition, role, step), in order of first appearance. Events that
    are not calls are skipped."""
    lines: dict[tuple[str, str, str], LedgerLine] = {}
    # A run's 100,000 calls name a handful of models: each (model, batch) is priced once.
    rates: dict[tuple[str, bool], tuple[float, float]] = {}
    for cond, evs in events.items():
        for e in evs:
            c = e if isinstance(e, CallCost) else CallCost.of(e)
            if c is None:
                continue
            key = (cond, c.role, c.step)
            line = lines.get(key)
            if line is None:
                line = lines[key] = LedgerLine(*key)
            pt, ct = c.prompt_tokens, c.completion_tokens
            price = prices.get(c.model)
            batch = c.batch and not c.cache_hit
            rate = rates.get((c.model, batch))
            if rate is None:
                rate = rates[(c.model, batch)] = rates_of(price, batch) if price is not None else (0.0, 0.0)
            p_in, p_out = rate
            usd = (pt * p_in + ct * p_out) / 1e6
            if c.cache_hit:
                line.cache_hits += 1
                line.cache_prompt_tokens += pt
                line.cache_completion_tokens += ct
                line.usd_saved += usd
                continue
            line.calls += c.attempts
            line.prompt_tokens += pt
            line.completion_tokens += ct
            line.usd += usd
            line.failed += int(c.failed)
            line.unpriced += c.attempts if price is None else 0
            if c.batch:
                line.batch_calls += c.attempts
                if price is not None:
                    line.usd_saved_by_batch += (pt * price.input + ct * price.output) / 1e6 - usd
    return list(lines.values())


_COMPACT = ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "cache_prompt_tokens",
            "cache_completion_tokens", "failed")


def compact_ledger(events: Iterable[Any]) -> dict[str, list[int]]:
    """One question's calls as "role<TAB>step<TAB>model" -> counts (see `_COMPACT`), small enough
    to keep with its result row, so a report need not re-read every transcript."""
    out: dict[str, list[int]] = {}
    for e in events:
        if _get(e, "kind") != "call":
            continue
        key = "\t".join((str(_get(e, "role", "")), str(_get(e, "step", "")), str(_get(e, "model", ""))))
        v = out.setdefault(key, [0] * len(_COMPACT))
        pt, ct = _usage(e)
        if _get(e, "cache_hit", False):
            v[3] += 1
            v[4] += pt
            v[5] += ct
        else:
            v[0] += int(_get(e, "attempts", 1) or 0)
            v[1] += pt
            v[2] += ct
            v[6] += int(bool(_get(e, "error")))
    return out


def ledger_from_compact(per_condition: Mapping[str, Iterable[Mapping[str, Sequence[int]]]],
                        prices: Mapping[str, PriceLike]) -> list[LedgerLine]:
    """`ledger` from the compact per-question ledgers of each condition's rows."""
    lines: dict[tuple[str, str, str], LedgerLine] = {}
    for cond, questions in per_condition.items():
        for q in questions:
            for key, v in q.items():
                role, step, model = key.split("\t")
                line = lines.setdefault((cond, role, step), LedgerLine(cond, role, step))
                price = prices.get(model)
                for name, x in zip(_COMPACT, v, strict=True):
                    setattr(line, name, getattr(line, name) + int(x))
                if price is not None:
                    line.usd += (v[1] * price.input + v[2] * price.output) / 1e6
                    line.usd_saved += (v[4] * price.input + v[5] * price.output) / 1e6
                else:
                    line.unpriced += int(v[0])
    return list(lines.values())


def condition_totals(lines: Iterable[LedgerLine]) -> dict[str, LedgerLine]:
    """Sum the lines of each condition into one line (role and step `all`)."""
    out: dict[str, LedgerLine] = {}
    for ln in lines:
        tot = out.setdefault(ln.condition, LedgerLine(ln.condition, "all", "all"))
        for f in fields(LedgerLine):
            if f.name not in ("condition", "role", "step"):
                setattr(tot, f.name, getattr(tot, f.name) + getattr(ln, f.name))
    return out


def usd_per_extra_correct(usd_a: float, correct_a: int, usd_b: float, correct_b: int) -> tuple[float, str]:
    """Dollars b spends beyond a per answer b gets right beyond a, on the same questions.

    Returns (value, note); the value is nan when b gets no extra answer right, and <= 0 when b is
    both better and no dearer.
    """
    extra = correct_b - correct_a
    spent = usd_b - usd_a
    if extra <= 0:
        return math.nan, f"b is not more accurate ({extra:+d} correct): no extra correct answer to price"
    if spent <= 0:
        return spent / extra, "b is more accurate and no dearer"
    return spent / extra, ""


class _CostRow(Protocol):
    condition: str
    repeat: int
    correct: bool
    cost_usd: float

    @property
    def key(self) -> Any: ...


def usd_per_extra_correct_rows(rows: Iterable[_CostRow], a: str, b: str) -> tuple[float, str]:
    """`usd_per_extra_correct` over the (question, repeat) pairs both conditions answered."""
    by: dict[str, dict[object, _CostRow]] = {a: {}, b: {}}
    for r in rows:
        if r.condition in by:
            by[r.condition][(r.key, r.repeat)] = r
    common = by[a].keys() & by[b].keys()
    if not common:
        return math.nan, f"{a} and {b} share no answered question"
    ra = [by[a][k] for k in common]
    rb = [by[b][k] for k in common]
    return usd_per_extra_correct(sum(r.cost_usd for r in ra), sum(r.correct for r in ra),
                                 sum(r.cost_usd for r in rb), sum(r.correct for r in rb))
