"""Statistics for comparing evaluation conditions answered on the same questions.

Accuracy gets a percentile bootstrap or Wilson interval; two conditions get a paired bootstrap
interval on the accuracy difference plus an exact McNemar test on the discordant questions.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)
"""A question's key (dataset, qid): anything hashable."""

__all__ = [
    "PairedComparison",
    "accuracy_ci",
    "accuracy_cis",
    "format_points",
    "mean_ci",
    "mean_sd",
    "paired_comparison",
    "paired_comparisons",
    "percentile_bootstrap",
    "percentile_bootstraps",
    "wilson_ci",
]

# SciPy is imported by the functions that call it (a second of imports): a report whose tables run
# no bootstrap and no exact test (a single condition, no pairs) never loads it.


def _as_bool_array(values: Iterable[object]) -> np.ndarray:
    """Strict 0/1 check: a stray None or score must not silently count as 'wrong'."""
    arr = np.asarray(list(values), dtype=object)
    bad = [v for v in arr if not (isinstance(v, bool | np.bool_ | int | np.integer) and v in (0, 1))]
    if bad:
        raise ValueError(f"correctness values must be bool (or 0/1), got {bad[0]!r}")
    return arr.astype(bool)


BATCH = 1000
"""Resamples drawn at once: bounds memory at BATCH x n indices for large question sets."""


def percentile_bootstrap(x: np.ndarray, *, n_boot: int, seed: int, level: float) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(x); (nan, nan) below two observations, where it is meaningless.

    The same numbers as `scipy.stats.bootstrap((x,), np.mean, n_resamples=n_boot, batch=BATCH,
    method="percentile", vectorized=True, rng=np.random.default_rng(seed))`, which the tests check on
    random inputs: the same indices in the same order, each batch's means, SciPy's quantiles. SciPy
    gathers the indices by fancy indexing (three times `np.take`'s cost here), validates its
    inputs and computes a standard error nobody reads; a report runs a hundred of these."""
    return percentile_bootstraps([x], n_boot=n_boot, seed=seed, level=level)[0]


def percentile_bootstraps(xs: Sequence[np.ndarray], *, n_boot: int, seed: int, level: float
                          ) -> list[tuple[float, float]]:
    """`percentile_bootstrap` of each of `xs`, in order. With one seed, samples of one size draw the
    same resamples' indices, so each batch of them is drawn once for all (the draw is most of a
    bootstrap's cost): each interval is the one it would get alone."""
    out: list[tuple[float, float]] = [(float("nan"), float("nan"))] * len(xs)
    by_size: dict[int, list[int]] = {}
    for i, x in enumerate(xs):
        if x.size >= 2:
            by_size.setdefault(x.size, []).append(i)
    for n, members in by_size.items():
        rng = np.random.default_rng(seed)
        means = [np.empty(n_boot, dtype=np.result_type(xs[i].dtype, np.float64)) for i in members]
        for start in range(0, n_boot, BATCH):
            size = min(BATCH, n_boot - start)
            drawn = rng.integers(0, n, (size, n))
            for i, m in zip(members, means, strict=True):
                np.mean(np.take(xs[i], drawn), axis=-1, out=m[start:start + size])
        for i, m in zip(members, means, strict=True):
            alpha = np.asarray((1 - level) / 2, dtype=m.dtype)
            low, high = _quantiles(m, np.stack([alpha, 1 - alpha], axis=-1))
            out[i] = (float(low), float(high))
    return out


def _quantiles(values: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """The quantiles SciPy's bootstrap takes: `scipy.stats.quantile` (linear) since SciPy 1.15,
    `np.percentile` before it (pyproject allows scipy>=1.10)."""
    from scipy import stats

    quantile = getattr(stats, "quantile", None)
    if quantile is None:
        return np.asarray(np.percentile(values, 100 * probabilities))
    return np.asarray(quantile(values, probabilities, axis=-1))


def accuracy_ci(
    correct: Sequence[bool], *, n_boot: int = 10000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """Return (accuracy, ci_low, ci_high) with a percentile bootstrap CI (fractions, not points)."""
    return accuracy_cis([correct], n_boot=n_boot, seed=seed, level=level)[0]


def accuracy_cis(groups: Sequence[Sequence[bool]], *, n_boot: int = 10000, seed: int = 0, level: float = 0.95
                 ) -> list[tuple[float, float, float]]:
    """`accuracy_ci` of each group, in order, from one `percentile_bootstraps` call (groups of one
    size share their resamples' draws; each interval is the one it gets alone)."""
    xs = [_as_bool_array(correct).astype(float) for correct in groups]
    if any(x.size == 0 for x in xs):
        raise ValueError("accuracy_ci needs at least one result")
    cis = percentile_bootstraps(xs, n_boot=n_boot, seed=seed, level=level)
    return [(float(x.mean()), low, high) for x, (low, high) in zip(xs, cis, strict=True)]


def mean_ci(values: Sequence[float] | np.ndarray, *, n_boot: int = 10000, seed: int = 0,
            level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `values` (e.g. per-question mean correctness over repeats)."""
    return percentile_bootstrap(np.asarray(values, dtype=float), n_boot=n_boot, seed=seed, level=level)


def wilson_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k successes out of n (better than the bootstrap for small n)."""
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def _binomial_p(k: int, n: int) -> float:
    """Two-sided exact binomial test of k successes in n at 1/2."""
    from scipy import stats

    return float(stats.binomtest(k, n, 0.5).pvalue)


NOTHING_TO_TEST = "no question differs: nothing to test"
"""The verdict of a comparison without one discordant question."""


@dataclass(frozen=True)
class PairedComparison:
    """Condition b versus condition a on the same n questions; differences are b - a in points."""

    a: str
    b: str
    n: int
    acc_a: float
    acc_b: float
    diff_points: float
    ci_low: float
    ci_high: float
    b_only: int
    a_only: int
    p_mcnemar: float

    @property
    def verdict(self) -> str:
        """A difference counts only when the CI excludes 0 and McNemar agrees (p < 0.05)."""
        if self.b_only + self.a_only == 0:
            return NOTHING_TO_TEST  # p = 1 and a [0, 0] CI are no evidence of sameness, only of no discordance
        # Written as "excludes" so a nan CI (n < 2) falls through to "no detectable difference".
        excludes_zero = self.ci_low > 0 or self.ci_high < 0
        if not excludes_zero or not self.p_mcnemar < 0.05:
            return "no detectable difference"
        return "b better" if self.diff_points > 0 else "a better"

    @property
    def ci_text(self) -> str:
        """The CI as a table shows it, or in words why there is none: a bootstrap of answers that never
        differ is [0, 0], which would read as certainty."""
        if self.b_only + self.a_only == 0:
            return "none: no discordant question"
        if self.n < 2 or math.isnan(self.ci_low):
            return "none: fewer than 2 questions"
        return f"[{self.ci_low:.1f}, {self.ci_high:.1f}]"

    def as_row(self) -> dict[str, object]:
        """Flat dict of all fields plus the verdict, for tables and CSV."""
        return {**asdict(self), "verdict": self.verdict}


def paired_comparison(
    a_name: str,
    a: Mapping[K, bool],
    b_name: str,
    b: Mapping[K, bool],
    *,
    n_boot: int = 10000,
    seed: int = 0,
) -> PairedComparison:
    """Compare two conditions on the questions both answered (keys such as (dataset, qid))."""
    return paired_comparisons([(a_name, a, b_name, b)], n_boot=n_boot, seed=seed)[0]


def paired_comparisons(pairs: Sequence[tuple[str, Mapping[K, bool], str, Mapping[K, bool]]], *,
                       n_boot: int = 10000, seed: int = 0) -> list[PairedComparison]:
    """`paired_comparison` of each (a_name, a, b_name, b), in order, their intervals from one
    `percentile_bootstraps` call: pairs on as many questions share their resamples' draws (a
    report's pairs are usually all on the same questions); each interval is the one it gets alone."""
    prepared = [_paired_counts(a_name, a, b_name, b) for a_name, a, b_name, b in pairs]
    cis = percentile_bootstraps([d for *_rest, d in prepared], n_boot=n_boot, seed=seed, level=0.95)
    out = []
    for (a_name, _a, b_name, _b), (n, ra, rb, b_only, a_only, _d), (low, high) in zip(pairs, prepared, cis,
                                                                                     strict=True):
        # Exact McNemar: under H0 each discordant question is equally likely to favour a or b.
        discordant = b_only + a_only
        p = _binomial_p(b_only, discordant) if discordant else 1.0
        acc_a, acc_b = float(ra.mean()), float(rb.mean())
        out.append(PairedComparison(a=a_name, b=b_name, n=n, acc_a=acc_a, acc_b=acc_b,
                                    diff_points=100.0 * (acc_b - acc_a), ci_low=100.0 * low, ci_high=100.0 * high,
                                    b_only=b_only, a_only=a_only, p_mcnemar=p))
    return out


def _paired_counts(a_name: str, a: Mapping[K, bool], b_name: str, b: Mapping[K, bool]
                   ) -> tuple[int, np.ndarray, np.ndarray, int, int, np.ndarray]:
    """The shared questions' count, both conditions' correctness on them, the discordant counts and
    the per-question differences b - a that the bootstrap resamples."""
    # Sort by repr so the bootstrap draw depends on the key set, not on dict insertion order,
    # and so mixed key types never fail to compare.
    keys = sorted(a.keys() & b.keys(), key=repr)
    if not keys:
        raise ValueError(f"{a_name!r} and {b_name!r} share no questions; nothing to compare")
    ra = _as_bool_array(a[k] for k in keys)
    rb = _as_bool_array(b[k] for k in keys)
    # Resampling per-question differences is resampling questions jointly for both conditions,
    # which keeps the pairing (and its variance reduction) intact.
    d = rb.astype(float) - ra.astype(float)
    return len(keys), ra, rb, int(np.sum(rb & ~ra)), int(np.sum(ra & ~rb)), d


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample sd (ddof=1) of repeated runs; sd is nan for a single run."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("mean_sd needs at least one value")
    sd = float(np.std(x, ddof=1)) if x.size > 1 else float("nan")
    return float(x.mean()), sd


def format_points(x: float, *, signed: bool = True, digits: int = 1) -> str:
    """Format a difference already in points, e.g. +3.2 (nan prints as 'n/a')."""
    if np.isnan(x):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
