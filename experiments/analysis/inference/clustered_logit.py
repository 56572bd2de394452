"""Logistic models of a 2x2 with the question as cluster, through statsmodels.

Two models, reported next to the bootstrap because they answer slightly different questions:
- GEE (binomial, logit link, exchangeable working correlation within a question, robust
  sandwich SEs): population-averaged odds ratios;
- conditional logit (one intercept per question, conditioned away): question-specific odds
  ratios; only questions with both a right and a wrong answer inform it. Single runs only: with
  repeats a question's runs are correlated beyond its intercept, and statsmodels' conditional
  logit has no cluster-robust SE, so its CIs would be too narrow; the row says so instead.
Both use effect coding (each flag at -1/2 and +1/2), so a main-effect odds ratio is the geometric
mean of its two simple odds ratios and the interaction is their ratio (OR at b=1 / OR at b=0).

A model that cannot be estimated (no variation, a cell all right or all wrong, no informative
question, no convergence) gives a row with no numbers and a note that says why.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from medpanel.experiments.analysis.inference.paired_data import Aligned

__all__ = ["GEE_MODEL", "LOGIT_MODEL", "OddsRatio", "factorial_logit"]

GEE_MODEL = "GEE, exchangeable within question"
LOGIT_MODEL = "conditional logit, by question"
# A log odds ratio beyond this is a separation artefact, not an estimate (OR > 3 million).
_MAX_LOG_OR = 15.0


@dataclass(frozen=True)
class OddsRatio:
    term: str
    model: str
    odds_ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    note: str = ""


def _missing(terms: list[str], model: str, why: str) -> list[OddsRatio]:
    return [OddsRatio(t, model, math.nan, math.nan, math.nan, math.nan, why) for t in terms]


def _design(aligned: Aligned, cells: dict[tuple[int, int], str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Long format: one row per (question, cell, run) -> y, effect-coded X (a, b, a*b), group."""
    ys, xs, gs = [], [], []
    n, k = aligned.n, aligned.repeats
    q = np.repeat(np.arange(n), k)
    for (fa, fb), slug in cells.items():
        xa, xb = fa - 0.5, fb - 0.5
        ys.append(aligned.y[aligned.index(slug)].reshape(-1))
        # With +-1/2 coding the coefficient of xa * xb is log(OR_a | b=1) - log(OR_a | b=0).
        xs.append(np.tile([xa, xb, xa * xb], (n * k, 1)))
        gs.append(q)
    return np.concatenate(ys).astype(float), np.vstack(xs), np.concatenate(gs)


def _cell_problem(y: np.ndarray, x: np.ndarray, cells: dict[tuple[int, int], str]) -> str:
    for (fa, fb), slug in cells.items():
        sel = (x[:, 0] == fa - 0.5) & (x[:, 1] == fb - 0.5)
        if sel.any() and (y[sel].min() == y[sel].max()):
            return f"{slug} is all {'right' if y[sel][0] else 'wrong'}: odds ratios unbounded (separation)"
    return ""


def _rows(res: Any, terms: list[str], model: str, alpha: float) -> list[OddsRatio]:
    # Read inside _fit's warnings scope: statsmodels computes the standard errors here, on first use,
    # and a negative robust variance is numpy's "invalid value encountered in sqrt" on the reader's
    # terminal unless it is caught and said in words below.
    params = np.asarray(res.params)
    ci = np.asarray(res.conf_int(alpha=alpha))
    p = np.asarray(res.pvalues)
    off = len(params) - len(terms)  # GEE has an intercept first
    params, ci, p = params[off:], ci[off:], p[off:]
    if not np.all(np.isfinite(params)) or np.any(np.abs(params) > _MAX_LOG_OR):
        return _missing(terms, model, "did not converge to finite odds ratios (quasi-separation)")
    if not np.all(np.isfinite(ci)):
        return _missing(terms, model, "no standard error: the robust variance estimate is negative or undefined "
                                      "(too few questions for this model)")
    out = []
    for t, b, (lo, hi), pv in zip(terms, params, ci, p, strict=True):
        if hi - lo < 1e-6:
            # A zero-width interval (and a p near 0 for an OR of 1) is the sandwich SE collapsing where
            # no question's answer ever changes with this term, not evidence.
            out.append(OddsRatio(t, model, math.nan, math.nan, math.nan, math.nan,
                                 "no question where this term changes an answer: standard error 0"))
        else:
            out.append(OddsRatio(t, model, float(np.exp(b)), float(np.exp(lo)), float(np.exp(hi)), float(pv)))
    return out


def _fit(fit: Callable[[], object], terms: list[str], model: str, alpha: float) -> list[OddsRatio]:
    """The fit and the reading of its estimates, with statsmodels' and numpy's warnings kept in this
    scope: each one that matters becomes the row's note in words, the rest (overflow on the way to
    an infinite odds ratio) are what the checks in `_rows` read from the numbers."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = fit()
        except np.linalg.LinAlgError:
            # Newton's Hessian turns singular when the likelihood climbs towards an infinite odds ratio.
            return _missing(terms, model, "no finite odds ratios (quasi-separation: singular Hessian)")
        except (ValueError, ZeroDivisionError, OverflowError) as exc:
            return _missing(terms, model, f"fit failed: {type(exc).__name__}: {str(exc)[:80]}")
        trouble = [w for w in caught
                   if "converge" in str(w.message).lower() or "separation" in str(w.message).lower()]
        if trouble:
            return _missing(terms, model, f"not estimable: {str(trouble[0].message).splitlines()[0][:100]}")
        return _rows(res, terms, model, alpha)


def factorial_logit(
    aligned: Aligned, cells: dict[tuple[int, int], str], names: tuple[str, str], *, level: float = 0.95
) -> list[OddsRatio]:
    """Odds ratios for both main effects and the interaction, from GEE and conditional logit."""
    a, b = names
    terms = [f"{a} (main)", f"{b} (main)", f"{a} x {b} (ratio of ORs)"]
    alpha = 1 - level
    if aligned.n == 0:
        why = "no question answered in every cell"
        return _missing(terms, GEE_MODEL, why) + _missing(terms, LOGIT_MODEL, why)
    y, x, g = _design(aligned, cells)
    if y.min() == y.max():
        why = f"every answer is {'right' if y[0] else 'wrong'}: nothing to model"
        return _missing(terms, GEE_MODEL, why) + _missing(terms, LOGIT_MODEL, why)
    out: list[OddsRatio] = []
    problem = _cell_problem(y, x, cells)
    if problem:
        out += _missing(terms, GEE_MODEL, problem)
    else:
        # Imported here: statsmodels takes seconds to import (see _weighted_clogit).
        from statsmodels.genmod.cov_struct import Exchangeable
        from statsmodels.genmod.families import Binomial
        from statsmodels.genmod.generalized_estimating_equations import GEE

        xc = np.column_stack([np.ones(len(y)), x])
        gee = GEE(y, xc, groups=g, family=Binomial(), cov_struct=Exchangeable())
        out += _fit(lambda: gee.fit(maxiter=100), terms, GEE_MODEL, alpha)
    if aligned.repeats > 1:
        out += _missing(terms, LOGIT_MODEL, "not fitted with repeats: a question's runs are not independent given its "
                                            "intercept and the conditional logit has no clustered SE (see GEE)")
        return out
    out += _clogit(aligned, cells, terms, alpha)
    return out


def _weighted_clogit() -> type:
    """The weighted conditional logit class, built on first use: statsmodels takes seconds to import,
    and every `medpanel` command imports the report (most never fit a model)."""
    from statsmodels.discrete.conditional_models import ConditionalLogit

    # statsmodels ships no type information, so ConditionalLogit is Any to mypy.
    class _WeightedConditionalLogit(ConditionalLogit):  # type: ignore[misc]
        """statsmodels' conditional logit over distinct groups, each counted as often as it occurs.

        Questions with the same answers in the four cells contribute identical conditional likelihood
        terms, so fitting the <= 14 distinct informative patterns with weights is the same fit as
        fitting all questions, and avoids statsmodels' per-group Python recursion over 862 groups.
        """

        def __init__(self, endog: np.ndarray, exog: np.ndarray, groups: np.ndarray, weights: np.ndarray) -> None:
            super().__init__(endog, exog, groups=groups)
            self._weights = weights  # in group order: groups are numbered in order of first appearance

        def loglike(self, params: np.ndarray) -> float:
            return float(sum(w * self.loglike_grp(g, params) for g, w in enumerate(self._weights)))

        def score(self, params: np.ndarray) -> np.ndarray:
            return sum((w * self.score_grp(g, params) for g, w in enumerate(self._weights)),
                       np.zeros(self.k_params))

    return _WeightedConditionalLogit


def _clogit(aligned: Aligned, cells: dict[tuple[int, int], str], terms: list[str], alpha: float) -> list[OddsRatio]:
    order = list(cells)
    yq = np.column_stack([aligned.y[aligned.index(cells[c]), :, 0] for c in order])  # (questions, 4)
    # Only questions with both outcomes carry information once the question's intercept is gone.
    informative = yq.min(axis=1) != yq.max(axis=1)
    if not informative.any():
        return _missing(terms, LOGIT_MODEL, "no question with both a right and a wrong answer")
    patterns, counts = np.unique(yq[informative], axis=0, return_counts=True)
    for j, c in enumerate(order):
        if patterns[:, j].min() == patterns[:, j].max():
            state = "right" if patterns[0, j] else "wrong"
            return _missing(terms, LOGIT_MODEL, f"among questions with both outcomes, {cells[c]} is all {state}: "
                                                "odds ratios unbounded (separation)")
    xcell = np.array([[a - 0.5, b - 0.5, (a - 0.5) * (b - 0.5)] for a, b in order])
    y = patterns.reshape(-1).astype(float)
    x = np.tile(xcell, (len(patterns), 1))
    g = np.repeat(np.arange(len(patterns)), len(order))
    model = _weighted_clogit()(y, x, g, counts.astype(float))
    # Newton (numerical Hessian from the score) stops at a tighter optimum than the default BFGS.
    return _fit(lambda: model.fit(method="newton", disp=0), terms, LOGIT_MODEL, alpha)
