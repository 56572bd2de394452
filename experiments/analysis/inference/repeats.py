"""Statistics of repeated runs (`--repeat K`) that use every run, not repeat 0 alone.

Per condition: accuracy over all runs with two bootstrap CIs (questions, each carrying its mean
over the runs; and the two-level one: questions, then runs within each drawn question, which
over-covers, see docs/statistics.md), the per-question flip rate (questions whose correctness is not the same in every
run), pass^k (correct in all k runs; for k < K the unbiased estimate over K runs) and the runs'
mean +- sd. Paired comparisons use each question's mean correctness over its runs
(`contrasts.pair_family`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from medpanel.experiments.analysis.inference.contrasts import Adjusted, pair_family
from medpanel.experiments.analysis.inference.paired_data import Correctness, align
from medpanel.experiments.analysis.inference.resample import percentile_ci, resample_cell_means

__all__ = ["RepeatSummary", "flip_rate", "pass_hat_k", "repeat_comparisons", "repeat_summary"]


def flip_rate(y: np.ndarray) -> float:
    """Share of questions (rows of a bool (questions, runs) array) whose correctness changes across runs."""
    y = np.asarray(y, dtype=bool)
    if y.shape[0] == 0:
        return math.nan
    return float(np.mean(y.min(axis=1) != y.max(axis=1)))


def pass_hat_k(y: np.ndarray, k: int) -> float:
    """pass^k: the chance a question is answered right in all of k runs.

    With K >= k runs per question the unbiased estimate is the mean of C(s, k) / C(K, k), s = the
    question's right answers (the tau-bench estimator); at k = K it is the share right in all K.
    """
    y = np.asarray(y, dtype=bool)
    big_k = y.shape[1]
    if not 1 <= k <= big_k:
        raise ValueError(f"pass^k needs 1 <= k <= runs ({big_k}), got k={k}")
    s = y.sum(axis=1)
    return float(np.mean([math.comb(int(v), k) for v in s]) / math.comb(big_k, k)) if len(s) else math.nan


@dataclass(frozen=True)
class RepeatSummary:
    condition: str
    n: int
    repeats: int
    accuracy: float
    """Points, over every run of every question."""
    ci_low: float
    ci_high: float
    """Bootstrap over questions, each with its mean over the runs."""
    ci2_low: float
    ci2_high: float
    """Two-level bootstrap: questions, then runs within each drawn question (conservative)."""
    run_accuracies: list[float]
    run_sd: float
    flip_rate: float
    flips: int
    pass_all: float
    """pass^K in points: right in every run."""
    dropped: int

    def as_row(self) -> dict[str, object]:
        return {"condition": self.condition, "n": self.n, "runs": self.repeats, "accuracy_%": self.accuracy,
                "ci_low": self.ci_low, "ci_high": self.ci_high,
                "ci2_low": self.ci2_low, "ci2_high": self.ci2_high, "run_sd": self.run_sd,
                "flip_rate_%": 100 * self.flip_rate, "flips": self.flips, f"pass^{self.repeats}_%": self.pass_all,
                "per_run": " / ".join(f"{a:.1f}" for a in self.run_accuracies), "dropped": self.dropped}


def repeat_summary(
    data: Correctness, conditions: Sequence[str], *, n_boot: int = 10_000, seed: int = 0, level: float = 0.95
) -> list[RepeatSummary]:
    """One row per condition, on the questions it answered in every run."""
    out = []
    for c in conditions:
        al = align(data, [c])
        y = al.y[0]
        if al.n == 0:
            nan = math.nan
            out.append(RepeatSummary(c, 0, al.repeats, nan, nan, nan, nan, nan, [], nan, nan, 0, nan, al.dropped))
            continue
        ci = []
        for two in (False, True):
            draws = 100.0 * resample_cell_means(al.successes(), al.repeats, n_boot=n_boot, seed=seed, two_level=two)
            lo, hi = percentile_ci(draws, level)
            ci += [float(lo[0]), float(hi[0])]
        runs = (100.0 * y.mean(axis=0)).tolist()
        sd = float(np.std(runs, ddof=1)) if len(runs) > 1 else math.nan
        flips = int(np.sum(y.min(axis=1) != y.max(axis=1)))
        out.append(RepeatSummary(c, al.n, al.repeats, float(100.0 * y.mean()), ci[0], ci[1], ci[2], ci[3], runs, sd,
                                 flips / al.n, flips, 100.0 * pass_hat_k(y, al.repeats), al.dropped))
    return out


def repeat_comparisons(
    data: Correctness, pairs: Sequence[tuple[str, str]], *, alpha: float = 0.05, n_boot: int = 10_000, seed: int = 0,
    two_level: bool = False,
) -> list[Adjusted]:
    """b - a for each pair over every run: per-question mean correctness, paired over questions,
    exact sign-flip p, bootstrap CI over questions (`two_level`: then runs), Holm over the pairs."""
    return pair_family(data, pairs, alpha=alpha, n_boot=n_boot, seed=seed, two_level=two_level)
