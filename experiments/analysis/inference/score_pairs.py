"""Paired comparisons of a bounded continuous score (free-text rubric scores, MedRBench's 0/1
judgements): the mean difference with a paired bootstrap interval and a Wilcoxon signed-rank test.

Accuracy comparisons use McNemar, which needs a yes/no per question; a HealthBench score is a
fraction (and can be below 0 before the mean is clipped), so the per-question differences are
tested directly: the Wilcoxon signed-rank test (scipy, two-sided, zero differences dropped as
Wilcoxon's original rule does) and a percentile interval from resampling questions. A family of
comparisons is Holm-adjusted by the caller (`contrasts.holm`), as every other family is.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

__all__ = ["ScorePair", "paired_scores"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class ScorePair:
    n: int
    """Questions both conditions have a score for."""
    mean_a: float
    mean_b: float
    diff: float
    """mean(b - a) over the paired questions."""
    ci_low: float
    ci_high: float
    p_wilcoxon: float
    """nan where every paired difference is 0 (nothing to test)."""
    n_differ: int


def paired_scores(a: Mapping[K, float], b: Mapping[K, float], *, n_boot: int = 10000,
                  seed: int = 0) -> ScorePair:
    """Condition a's and b's scores on their shared questions (keys), b - a."""
    from scipy.stats import wilcoxon

    keys = [k for k in a if k in b]
    if not keys:
        raise ValueError("no question has a score in both conditions")
    xa = np.array([a[k] for k in keys], dtype=float)
    xb = np.array([b[k] for k in keys], dtype=float)
    d = xb - xa
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(n_boot, len(d)))
    means = d[idx].mean(axis=1)
    low, high = (float(x) for x in np.percentile(means, [2.5, 97.5]))
    differ = int(np.count_nonzero(d))
    p = math.nan
    if differ:
        p = float(wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)
    return ScorePair(n=len(d), mean_a=float(xa.mean()), mean_b=float(xb.mean()), diff=float(d.mean()),
                     ci_low=low, ci_high=high, p_wilcoxon=p, n_differ=differ)
