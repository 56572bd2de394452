"""Paired contrasts between conditions: estimates, bootstrap CIs, exact tests and Holm adjustment.

A contrast is a weighted sum of condition accuracies, e.g. b - a, or the 2x2 interaction
(c1r1 - c1r0) - (c0r1 - c0r0). Per question it has a value (the same weights over that question's
mean correctness in each condition); the estimate is their mean, the CI resamples questions, and
the p-value is exact:
- a plain pair with one run per question: exact McNemar on the discordant questions;
- anything else (factorial effects, means over repeats): the exact sign-flip test of the
  per-question values, which reduces to McNemar for a plain pair.
A family of contrasts is then Holm-adjusted and the verdict reads the adjusted p.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from medpanel.experiments.analysis.inference.paired_data import Aligned, Correctness, align
from medpanel.experiments.analysis.inference.resample import (
    mcnemar_pvalue,
    percentile_ci,
    resample_cell_means,
    sign_flip_pvalue,
)

__all__ = ["Adjusted", "Contrast", "adjust", "compute_contrasts", "holm", "pair_family"]

NO_DIFFERENCE = "no question differs"
ONE_LEVEL = "questions"
TWO_LEVEL = "questions, then runs within each question"


@dataclass(frozen=True)
class Contrast:
    """One contrast on n paired questions; estimate and CI in accuracy points."""

    name: str
    weights: dict[str, float]
    n: int
    repeats: int
    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str
    resampled: str
    words: tuple[str, str] = ("positive", "negative")
    """Verdict wording for a significant positive / negative estimate."""
    b_only: int | None = None
    """Plain pair, one run: questions only the + condition got right (and `a_only` the other way)."""
    a_only: int | None = None
    note: str = ""
    degenerate: str = ""
    """Why the bootstrap CI has no width, in words ("no question differs", "the same difference on every
    question"); empty when it has one. A [x, x] interval is no evidence of certainty, so tables say this."""
    draws: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)
    """Bootstrap draws of the estimate (points), kept for the multiplicity-adjusted CI."""


@dataclass(frozen=True)
class Adjusted:
    """A contrast inside a family of m tests: Holm-adjusted p, Bonferroni CI, verdict."""

    contrast: Contrast
    m: int
    p_holm: float
    adj_low: float
    adj_high: float
    adj_level: float
    verdict: str

    def as_row(self) -> dict[str, object]:
        c = self.contrast
        return {"contrast": c.name, "n": c.n, "repeats": c.repeats, "estimate_pts": c.estimate,
                "ci_low": c.ci_low, "ci_high": c.ci_high, "adj_ci_low": self.adj_low, "adj_ci_high": self.adj_high,
                "b_only": c.b_only, "a_only": c.a_only, "test": c.test, "p_raw": c.p_value, "p_holm": self.p_holm,
                "m": self.m, "verdict": self.verdict, "note": c.note}


def _scale(weights: Sequence[float], repeats: int) -> int:
    """The integer that makes every per-question contrast value whole (for the exact test)."""
    den = 1
    for w in weights:
        f = Fraction(w).limit_denominator(1000)
        if abs(float(f) - w) > 1e-9:
            raise ValueError(f"contrast weight {w!r} is not a simple fraction")
        den = den * f.denominator // math.gcd(den, f.denominator)
    return den * repeats


def compute_contrasts(
    aligned: Aligned,
    specs: Sequence[tuple[str, Mapping[str, float], tuple[str, str]]],
    *,
    n_boot: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
    two_level: bool = False,
    cell_draws: np.ndarray | None = None,
) -> list[Contrast]:
    """Contrasts `(name, {condition: weight}, (word if > 0, word if < 0))` on aligned data.

    One bootstrap of all conditions' accuracies serves every contrast, so their CIs come from the
    same resamples, each question carrying its mean correctness over its runs. `two_level` also
    resamples runs within each drawn question; it over-covers (the question-level resample already
    carries the run-to-run noise, see docs/statistics.md), so it is not the default. `cell_draws`
    (from `resample_cell_means` with the same settings) reuses a bootstrap already drawn.
    """
    k = aligned.repeats
    n = aligned.n
    two = two_level and k > 1
    s = aligned.successes()
    w = np.array([[spec[1].get(c, 0.0) for c in aligned.conditions] for spec in specs], dtype=float)
    unknown = [c for spec in specs for c in spec[1] if c not in aligned.conditions]
    if unknown:
        raise ValueError(f"contrast names condition(s) not in the data: {', '.join(map(repr, unknown))}")
    if n == 0:
        return [Contrast(name, dict(wts), 0, k, math.nan, math.nan, math.nan, math.nan, "not tested", "",
                         words, note=f"no question answered in every condition and run ({aligned.dropped} left out)")
                for name, wts, words in specs]
    if cell_draws is None:
        cell_draws = resample_cell_means(s, k, n_boot=n_boot, seed=seed, two_level=two)
    draws = 100.0 * cell_draws @ w.T
    lo, hi = percentile_ci(draws, level)
    per_q = s @ w.T / k  # (questions, contrasts) in fractions
    out = []
    for j, (name, _weights, words) in enumerate(specs):
        d = per_q[:, j]
        plain_pair = k == 1 and sorted(w[j][w[j] != 0].tolist()) == [-1.0, 1.0]
        notes = []
        b_only = a_only = None
        if plain_pair:
            b_only, a_only = int((d > 0).sum()), int((d < 0).sum())
            p = float(mcnemar_pvalue(b_only, a_only))
            test = "exact McNemar"
        else:
            p = sign_flip_pvalue(d, _scale(w[j].tolist(), k))
            test = "exact sign-flip" + (f" on means over {k} runs" if k > 1 else "")
        degenerate = ""
        if not np.any(d != 0):
            notes.append("no question where the contrast is non-zero (no discordance): CI [0, 0], p = 1")
            degenerate = NO_DIFFERENCE
        elif n >= 2 and np.ptp(d) == 0:
            degenerate = "the same difference on every question"
        ci = (float(lo[j]), float(hi[j]))
        if n < 2:
            ci = (math.nan, math.nan)
            notes.append("fewer than 2 questions: no CI")
        if aligned.dropped:
            notes.append(f"{aligned.dropped} question(s) left out: not answered in every condition and run")
        out.append(Contrast(name, {c: float(x) for c, x in zip(aligned.conditions, w[j], strict=True) if x},
                            n, k, float(100.0 * d.mean()), ci[0], ci[1], p, test,
                            TWO_LEVEL if two else ONE_LEVEL + (f" (each with its mean over {k} runs)" if k > 1 else ""),
                            words, b_only, a_only, "; ".join(notes), degenerate,
                            draws[:, j].copy()))
    return out


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values; nan entries stay nan and are not counted.

    The i-th smallest of m p-values becomes max over j <= i of (m - j + 1) * p_(j), capped at 1.
    Written here rather than taken from statsmodels' `multipletests`, which runs a full garbage
    collection on every call: over a large report's heap that was seconds per family. The test
    holds it equal to statsmodels on random families with ties."""
    p = np.asarray(p_values, dtype=float)
    ok = ~np.isnan(p)
    out = np.full(p.shape, np.nan)
    valid = p[ok]
    m = valid.size
    if m:
        order = np.argsort(valid, kind="stable")
        steps = (m - np.arange(m)) * valid[order]
        adjusted = np.minimum(np.maximum.accumulate(steps), 1.0)
        back = np.empty(m)
        back[order] = adjusted
        out[ok] = back
    adjusted_p: list[float] = out.tolist()
    return adjusted_p


def adjust(contrasts: Sequence[Contrast], *, alpha: float = 0.05) -> list[Adjusted]:
    """Holm-adjust a family of contrasts; the verdict needs p_holm < alpha.

    The adjusted CI is the Bonferroni percentile interval at level 1 - alpha/m from the same
    draws: simultaneous for the family, and excluding 0 only where Holm also rejects.
    """
    p_holm = holm([c.p_value for c in contrasts])
    m = sum(1 for c in contrasts if not math.isnan(c.p_value))
    adj_level = 1 - alpha / max(m, 1)
    out = []
    for c, ph in zip(contrasts, p_holm, strict=True):
        if math.isnan(ph):
            verdict = "not tested"
        elif c.degenerate == NO_DIFFERENCE:
            verdict = f"{NO_DIFFERENCE}: nothing to test"
        elif ph < alpha:
            verdict = c.words[0] if c.estimate > 0 else c.words[1]
        else:
            verdict = "no detectable difference"
        if c.draws.size and not math.isnan(c.ci_low):
            lo, hi = percentile_ci(c.draws, adj_level)
            adj = (float(lo), float(hi))
        else:
            adj = (math.nan, math.nan)
        out.append(Adjusted(c, m, ph, adj[0], adj[1], adj_level, verdict))
    return out


def pair_family(
    data: Correctness,
    pairs: Sequence[tuple[str, str]],
    *,
    words: tuple[str, str] = ("b better", "a better"),
    alpha: float = 0.05,
    n_boot: int = 10_000,
    seed: int = 0,
    two_level: bool = False,
) -> list[Adjusted]:
    """b - a for each pair (a, b), each on its own common questions, Holm-adjusted as one family.

    With repeats every run is used: each question's mean correctness over its runs.
    """
    out = []
    for a, b in pairs:
        al = align(data, [a, b])
        out += compute_contrasts(al, [(f"{b} - {a}", {b: 1.0, a: -1.0}, words)], n_boot=n_boot, seed=seed,
                                 two_level=two_level)
    return adjust(out, alpha=alpha)
