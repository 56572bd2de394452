"""The planner for a 2x2 study: questions needed, what n can resolve, cost and wall time.

Pure functions; `medpanel plan` (experiments/cli/plan.py) prints them.

Every comparison of a 2x2 report, with the rates it needs:
- the four simple effects (plain pairs): the discordance rate p_d of the pair; exact McNemar power;
- the two main effects and the interaction (sign-flip tests): the second moment E[d^2] of their
  per-question contrast. Without a pilot, every pair of cells is assumed to disagree on the same
  share p_d of questions, and the cells to be exchangeable apart from the effects; then a main
  effect (the average of two pair differences) has E[d^2] = p_d / 2 and the interaction (the
  difference of two) 2 p_d. So a main effect needs about half the questions of a pair for the same
  effect, and an interaction twice as many.
- The verdict reads Holm-adjusted p-values, so each test is planned at alpha / m (Bonferroni): Holm
  rejects whatever Bonferroni rejects, so the planned power is a floor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from medpanel.experiments.analysis.inference.ledger import LedgerLine, PriceLike, rates_of
from medpanel.experiments.analysis.inference.paired_data import Aligned
from medpanel.experiments.analysis.inference.power import (
    Discordance,
    contrast_power,
    contrast_sample_size,
    detectable_effect,
    discordance_from_pilot,
    mcnemar_power,
    mcnemar_sample_size,
    second_moments,
)

__all__ = ["CostProfile", "PlanRow", "cost_projection", "plan_2x2", "profiles_from_ledger", "wall_time_s"]

Cells = Mapping[tuple[int, int], str]


@dataclass(frozen=True)
class PlanRow:
    comparison: str
    kind: str
    """"pair" (exact McNemar) or "contrast" (sign-flip, z form)."""
    effect_pts: float
    rate: float
    """p_d for a pair, E[d^2] for a contrast (fractions)."""
    alpha: float
    """The per-test level planned for: alpha / m of its Holm family."""
    n_needed: int
    n_available: int
    power_at_n: float
    detectable_pts: float
    """The smallest effect detected with the target power at n_available (nan: none)."""

    @property
    def warning(self) -> str:
        if self.n_needed <= self.n_available:
            return ""
        reach = f"{self.detectable_pts:.1f}" if not math.isnan(self.detectable_pts) else "no"
        if self.n_needed >= 2**60:
            return (f"no number of questions resolves {self.effect_pts:g} points at rate {self.rate:.3f} (the cells "
                    f"disagree too rarely to differ by that much); {self.n_available} resolve {reach} points")
        return (f"{self.n_available} questions cannot resolve {self.effect_pts:g} points "
                f"(needs {self.n_needed:,}); they resolve {reach} points at this power")

    def as_row(self) -> dict[str, object]:
        return {"comparison": self.comparison, "kind": self.kind, "effect_pts": self.effect_pts, "rate": self.rate,
                "alpha": self.alpha, "n_needed": self.n_needed, "n_available": self.n_available,
                "power_at_n": self.power_at_n, "detectable_pts": self.detectable_pts, "warning": self.warning}


def _factorial_weights(cells: Cells, a: str, b: str) -> dict[str, dict[str, float]]:
    c = cells
    return {
        f"{a} main effect": {c[1, 0]: 0.5, c[1, 1]: 0.5, c[0, 0]: -0.5, c[0, 1]: -0.5},
        f"{b} main effect": {c[0, 1]: 0.5, c[1, 1]: 0.5, c[0, 0]: -0.5, c[1, 0]: -0.5},
        f"{a} x {b} interaction": {c[1, 1]: 1.0, c[1, 0]: -1.0, c[0, 1]: -1.0, c[0, 0]: 1.0},
    }


def _pairs(cells: Cells) -> list[tuple[str, str]]:
    c = cells
    return [(c[0, 0], c[1, 0]), (c[0, 1], c[1, 1]), (c[0, 0], c[0, 1]), (c[1, 0], c[1, 1])]


def plan_2x2(
    cells: Cells,
    n_available: int,
    effect_points: float,
    *,
    factors: tuple[str, str] = ("c", "r"),
    discordance_rate: float | None = None,
    pilot: Aligned | None = None,
    power: float = 0.8,
    alpha: float = 0.05,
    family_factorial: int = 3,
    family_pairs: int = 4,
) -> list[PlanRow]:
    """One row per comparison: questions needed for `effect_points`, the power at `n_available`,
    and the effect `n_available` resolves. Rates from `pilot` (single runs or repeat means, for the
    same number of runs) or from `discordance_rate` (the share of questions two cells disagree on).
    For the interaction, the effect is the difference of differences."""
    if (pilot is None) == (discordance_rate is None):
        raise ValueError("give either a pilot or a discordance rate")
    delta = effect_points / 100.0
    a, b = factors
    weights = _factorial_weights(cells, a, b)
    if pilot is not None:
        m2 = second_moments(pilot, weights)
        scale = 2 * pilot.repeats
        rates = {f"{y} - {x}": discordance_from_pilot(pilot, x, y).rate for x, y in _pairs(cells)}
        single = pilot.repeats == 1
    else:
        assert discordance_rate is not None
        p = discordance_rate
        m2 = {f"{a} main effect": p / 2, f"{b} main effect": p / 2, f"{a} x {b} interaction": 2 * p}
        scale = 2
        rates = {f"{y} - {x}": p for x, y in _pairs(cells)}
        single = True
    out = []
    af = alpha / family_factorial
    for name, m in m2.items():
        sc = scale // 2 if name.endswith("interaction") else scale
        out.append(PlanRow(name, "contrast", effect_points, m, af,
                           _or_inf(lambda m=m, sc=sc: contrast_sample_size(delta, m, power=power, alpha=af, scale=sc)),
                           n_available, contrast_power(n_available, delta, m, alpha=af, scale=sc),
                           100 * detectable_effect(n_available, m, power=power, alpha=af, plain_pair=False, scale=sc)))
    ap = alpha / family_pairs
    for name, r in rates.items():
        if single and r > abs(delta):
            disc = Discordance((r + delta) / 2, (r - delta) / 2)
            need = _or_inf(lambda disc=disc: mcnemar_sample_size(disc, power=power, alpha=ap))
            pw = mcnemar_power(n_available, disc, alpha=ap)
            det = 100 * detectable_effect(n_available, r, power=power, alpha=ap)
            out.append(PlanRow(name, "pair", effect_points, r, ap, need, n_available, pw, det))
        else:  # repeat means: the sign-flip z form; or an effect larger than the discordance
            sc = pilot.repeats if pilot is not None else 1
            out.append(PlanRow(name, "contrast", effect_points, r, ap,
                               _or_inf(lambda r=r, sc=sc: contrast_sample_size(delta, r, power=power, alpha=ap,
                                                                                scale=sc)),
                               n_available, contrast_power(n_available, delta, r, alpha=ap, scale=sc),
                               100 * detectable_effect(n_available, r, power=power, alpha=ap, plain_pair=False,
                                                       scale=sc)))
    return out


def _or_inf(f: Any) -> int:
    try:
        return int(f())
    except ValueError:
        return 2**62  # beyond any benchmark: shown as "cannot"


@dataclass(frozen=True)
class CostProfile:
    """What one question costs a condition (from a pilot's ledger or stated)."""

    condition: str
    model: str
    sent_calls_per_q: float
    """Calls a run would send a question: a pilot's sent calls, or every call it requested when its
    cache is not counted on (`profiles_from_ledger(with_cache=False)`)."""
    prompt_tokens_per_q: float
    completion_tokens_per_q: float


def profiles_from_ledger(totals: Mapping[str, LedgerLine], questions: Mapping[str, int], model: str, *,
                         with_cache: bool = True) -> list[CostProfile]:
    """Per-question cost from a pilot's condition totals (`ledger.condition_totals`).

    `with_cache`: what the pilot actually sent (cache hits free, as a full run with the same cache
    would be); otherwise what it asked for (cache hits priced too, an upper bound).
    """
    out = []
    for cond, t in totals.items():
        n = questions[cond]
        calls = t.calls + (0 if with_cache else t.cache_hits)
        pt = t.prompt_tokens + (0 if with_cache else t.cache_prompt_tokens)
        ct = t.completion_tokens + (0 if with_cache else t.cache_completion_tokens)
        out.append(CostProfile(cond, model, calls / n, pt / n, ct / n))
    return out


def cost_projection(profiles: Sequence[CostProfile], n_questions: int, prices: Mapping[str, PriceLike], *,
                    repeats: int = 1, batch: bool = False) -> list[dict[str, Any]]:
    """Calls sent, tokens and USD per condition for n_questions x repeats, and a total row (USD nan
    when a model has no price). `batch`: every call priced at the batch price (`model.batch`)."""
    rows: list[dict[str, Any]] = []
    for p in profiles:
        k = n_questions * repeats
        price = prices.get(p.model)
        p_in, p_out = rates_of(price, batch) if price is not None else (math.nan, math.nan)
        usd = k * (p.prompt_tokens_per_q * p_in + p.completion_tokens_per_q * p_out) / 1e6
        rows.append({"condition": p.condition, "questions": n_questions, "repeats": repeats,
                     "sent_calls": k * p.sent_calls_per_q,
                     "tokens": k * (p.prompt_tokens_per_q + p.completion_tokens_per_q), "usd": usd})
    total = {key: float(sum(r[key] for r in rows)) for key in ("sent_calls", "tokens", "usd")}
    rows.append({"condition": "total", "questions": n_questions, "repeats": repeats, **total})
    return rows


def wall_time_s(profiles: Sequence[CostProfile], n_questions: int, *, latency_s: float, workers: int,
                repeats: int = 1) -> float:
    """calls x latency / workers: every worker busy, calls of a question one after another, no rate
    limit (a `--rpm` cap adds calls / rpm minutes as a floor)."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    calls = sum(p.sent_calls_per_q for p in profiles) * n_questions * repeats
    return calls * latency_s / workers


def batch_wall_time_s(profiles: Sequence[CostProfile], n_questions: int, *, batch_latency_s: float,
                      max_wait_s: float, in_flight: int, repeats: int = 1) -> float:
    """The same calls sent in batches (`model.batch`): each step of every question in flight goes out
    together, so a call takes a batch's turnaround (the wait to fill it, then its latency) and
    `in_flight` questions (workers x questions_per_worker) advance at once: calls x turnaround /
    in flight. No per-minute limit applies; a batch quota (enqueued tokens) is not modelled."""
    if in_flight < 1:
        raise ValueError("questions in flight must be at least 1")
    calls = sum(p.sent_calls_per_q for p in profiles) * n_questions * repeats
    return calls * (max_wait_s + batch_latency_s) / in_flight
