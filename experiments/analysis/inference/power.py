"""Planning a study before paying for it: power, sample size and detectable effects of paired tests.

A paired comparison of two conditions on the same questions is decided by its discordant
questions: p_b = P(b right, a wrong), p_a = P(a right, b wrong). The effect is p_b - p_a; the
discordance rate p_b + p_a is what the pairing leaves of the variance.
- `mcnemar_power(method="exact")`: the exact power of the exact McNemar test (the report's test):
  the number of discordant questions D ~ Binomial(n, p_b + p_a), and given D = d the test rejects
  when the smaller count is at or below the exact two-sided critical value; summed over d. No
  approximation beyond floating point.
- `mcnemar_power(method="connor")`: Connor's normal approximation (Connor 1987, Biometrics 43:
  207-211), power = Phi((sqrt(n) |delta| - z sqrt(p_d)) / sqrt(p_d - delta^2)).
- Factorial contrasts (main effects, interactions, repeat means) are tested by the exact sign-flip
  test, whose large-sample form is the same z-test with the per-question contrast's second moment
  m2 = E[d^2] in place of p_d (for a plain pair m2 = p_d: Connor's formula), plus a continuity
  correction of half a lattice step, which the exact test's discreteness costs (see
  `contrast_power`).

Rates come from a pilot run (`discordance_from_pilot`, `second_moments`) or from stated
assumptions (`discordance_from_accuracy`: baseline accuracy, effect, and the phi correlation of
the two conditions' correctness on a question).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from medpanel.experiments.analysis.inference.paired_data import Aligned

__all__ = [
    "Discordance",
    "contrast_power",
    "contrast_sample_size",
    "detectable_effect",
    "discordance_from_accuracy",
    "discordance_from_pilot",
    "mcnemar_power",
    "mcnemar_sample_size",
    "powers",
    "second_moments",
]

Method = Literal["exact", "connor"]


@dataclass(frozen=True)
class Discordance:
    """Per-question probabilities that only b (`b_only`) or only a (`a_only`) is right."""

    b_only: float
    a_only: float

    def __post_init__(self) -> None:
        if self.b_only < 0 or self.a_only < 0 or self.b_only + self.a_only > 1:
            raise ValueError(f"impossible discordance: b_only={self.b_only}, a_only={self.a_only}")

    @property
    def rate(self) -> float:
        return self.b_only + self.a_only

    @property
    def effect(self) -> float:
        """b - a in accuracy (a fraction)."""
        return self.b_only - self.a_only


def discordance_from_accuracy(acc_a: float, effect: float, rho: float) -> Discordance:
    """Stated assumptions -> discordance: a's accuracy, b - a, and the phi correlation of a's and
    b's correctness on the same question (0 = independent, 1 = the same questions right)."""
    acc_b = acc_a + effect
    if not (0 < acc_a < 1 and 0 < acc_b < 1):
        raise ValueError(f"accuracies must lie in (0, 1): a={acc_a}, b={acc_b}")
    both = acc_a * acc_b + rho * math.sqrt(acc_a * (1 - acc_a) * acc_b * (1 - acc_b))
    return Discordance(b_only=acc_b - both, a_only=acc_a - both)


def discordance_from_pilot(pilot: Aligned, a: str, b: str) -> Discordance:
    """Observed rates in a pilot: over questions and runs (run r of a against run r of b)."""
    ya, yb = pilot.y[pilot.index(a)], pilot.y[pilot.index(b)]
    if ya.size == 0:
        raise ValueError("the pilot has no question answered by both conditions")
    return Discordance(b_only=float(np.mean(yb & ~ya)), a_only=float(np.mean(ya & ~yb)))


def second_moments(pilot: Aligned, weights: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """E[d^2] of each named contrast's per-question value (mean correctness over the pilot's runs)."""
    s = pilot.successes() / pilot.repeats
    out = {}
    for name, w in weights.items():
        d = s @ np.array([w.get(c, 0.0) for c in pilot.conditions])
        out[name] = float(np.mean(d**2))
    return out


def _critical(d: np.ndarray, alpha: float) -> np.ndarray:
    """Largest k with 2 * P(X <= k) < alpha for X ~ Binomial(d, 1/2); -1 when none."""
    k = stats.binom.ppf(alpha / 2, d, 0.5).astype(np.int64)
    k = np.where(2 * stats.binom.cdf(k, d, 0.5) < alpha, k, k - 1)
    return np.where(d > 0, k, -1)


def _exact_power(n: int, disc: Discordance, alpha: float) -> float:
    pd = disc.rate
    if pd <= 0 or n <= 0:
        return 0.0
    q = disc.b_only / pd
    sd = math.sqrt(n * pd * (1 - pd))
    lo, hi = max(0, int(n * pd - 10 * sd - 10)), min(n, int(n * pd + 10 * sd + 10))
    d = np.arange(lo, hi + 1)
    k = _critical(d, alpha)
    reject = np.where(k >= 0, stats.binom.cdf(k, d, q) + stats.binom.sf(d - k - 1, d, q), 0.0)
    return float(np.sum(stats.binom.pmf(d, n, pd) * reject))


def contrast_power(
    n: int, effect: float, second_moment: float, *, alpha: float = 0.05, scale: int | None = 1
) -> float:
    """Large-sample power of the sign-flip (paired z) test of a contrast with mean `effect` and
    per-question second moment `second_moment` (both in fractions).

    `scale` is the contrast's lattice as in `resample.sign_flip_pvalue` (1: single-run pairs and
    interactions, 2: main effects, K or 2K: means over K runs). The exact test cannot reject
    between lattice points, so the threshold moves up by half a step of the sum (1 / scale): the
    usual continuity correction of McNemar's z test. `scale=None` leaves it out (Connor 1987).
    """
    var = second_moment - effect**2
    if n <= 0 or second_moment <= 0:
        return 0.0
    if var <= 0:
        return 1.0
    z = stats.norm.ppf(1 - alpha / 2)
    shift = math.sqrt(n) * abs(effect)
    crit = z * math.sqrt(second_moment) + (1 / (scale * math.sqrt(n)) if scale else 0.0)
    return float(stats.norm.cdf((shift - crit) / math.sqrt(var)) + stats.norm.cdf((-shift - crit) / math.sqrt(var)))


def mcnemar_power(n: int, disc: Discordance, *, alpha: float = 0.05, method: Method = "exact") -> float:
    """Power of the two-sided exact McNemar test at level alpha on n questions."""
    if method == "exact":
        return _exact_power(n, disc, alpha)
    if method == "connor":
        return contrast_power(n, disc.effect, disc.rate, alpha=alpha, scale=None)
    raise ValueError(f"unknown method {method!r}; use exact or connor")


def _smallest_n(power_at: Callable[[int], float], n0: int, target: float, n_max: int) -> int:
    """First n (stepping up from below n0, then back one by one) with power_at(n) >= target."""
    n = max(2, int(0.7 * n0))
    step = max(1, n0 // 100)
    while power_at(n) < target:
        n += step
        step += max(1, step // 10)  # n0 is an approximation: widen the stride if it was far off
        if n > n_max:
            raise ValueError(f"more than {n_max:,} questions needed")
    while n - 1 >= 2 and power_at(n - 1) >= target:
        n -= 1
    return n


def contrast_sample_size(
    effect: float, second_moment: float, *, power: float = 0.8, alpha: float = 0.05, scale: int | None = 1
) -> int:
    """Questions for the sign-flip/z test of a contrast to reach `power` (see `contrast_power`)."""
    if effect == 0:
        raise ValueError("an effect of 0 cannot be detected")
    if second_moment < effect**2:
        # E[d^2] >= (E d)^2: a rate this small (say two cells that never disagree in the pilot) cannot
        # carry this effect; the stepping search below would otherwise walk towards n_max one by one.
        raise ValueError(f"an effect of {effect:g} needs E[d^2] >= {effect**2:g}, the rate is {second_moment:g}")
    za, zb = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    n0 = (za * math.sqrt(second_moment) + zb * math.sqrt(max(second_moment - effect**2, 0.0))) ** 2 / effect**2
    return _smallest_n(lambda n: contrast_power(n, effect, second_moment, alpha=alpha, scale=scale),
                       math.ceil(n0), power, 10**8)


def mcnemar_sample_size(
    disc: Discordance, *, power: float = 0.8, alpha: float = 0.05, method: Method = "exact", n_max: int = 10**7
) -> int:
    """Smallest number of questions whose McNemar power reaches `power` (the exact power is a
    slightly saw-toothed function of n; this is the first n that reaches it)."""
    if disc.effect == 0:
        raise ValueError("an effect of 0 cannot be detected")
    n0 = contrast_sample_size(disc.effect, disc.rate, power=power, alpha=alpha, scale=None)
    if method == "connor":
        return n0
    return _smallest_n(lambda n: _exact_power(n, disc, alpha), n0, power, n_max)


def detectable_effect(
    n: int, second_moment: float, *, power: float = 0.8, alpha: float = 0.05, method: Method = "exact",
    plain_pair: bool = True, scale: int | None = 1,
) -> float:
    """Smallest effect (a fraction) detected with `power` on n questions, nan if none.

    A plain pair keeps its discordance rate `second_moment` = p_b + p_a fixed (McNemar, exact or
    Connor); any other contrast keeps its second moment fixed (`plain_pair=False`, the z form of
    the sign-flip test with lattice `scale`).
    """
    def pw(delta: float) -> float:
        if plain_pair and method == "exact":
            return _exact_power(n, Discordance((second_moment + delta) / 2, (second_moment - delta) / 2), alpha)
        return contrast_power(n, delta, second_moment, alpha=alpha,
                              scale=None if plain_pair else scale)

    # A pair's effect cannot exceed its discordance; a contrast's cannot exceed sqrt(E[d^2]).
    hi = second_moment if plain_pair else math.sqrt(second_moment)
    lo = 0.0
    if pw(hi * (1 - 1e-9)) < power:
        return math.nan
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pw(mid) < power else (lo, mid)
    return hi


def powers(ns: Sequence[int], disc: Discordance, *, alpha: float = 0.05) -> list[float]:
    """Exact McNemar power at several n (for a power curve)."""
    return [_exact_power(int(n), disc, alpha) for n in ns]
