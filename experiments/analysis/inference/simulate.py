"""Synthetic studies with planted effects, to test the statistics against known truth.

Model (per study, question q, condition c, run k):
    logit P(y = 1) = mu_c + u_q + v_qc,   u_q ~ N(0, question_sd),  v_qc ~ N(0, interaction_sd)
u is the question's difficulty, shared by every condition (what makes paired data correlated);
v is a persistent question x condition term (what makes conditions disagree beyond chance); runs
of the same (q, c) are independent draws given both. mu holds the planted effects.

`implied` integrates the model (Gauss-Hermite quadrature) to the population quantities a
planner needs: each condition's accuracy, the discordance of a pair, and the mean and second
moment of any per-question contrast. `logits_for` solves for the mu that give stated accuracies,
so effects can be planted in points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy import optimize
from scipy.special import expit

from medpanel.experiments.analysis.inference.paired_data import Aligned
from medpanel.experiments.analysis.inference.power import Discordance

__all__ = ["Design", "aligned_study", "implied_accuracy", "implied_contrast", "implied_discordance", "logits_for",
           "simulate"]

_NODES, _WEIGHTS = hermegauss(48)
_WEIGHTS = _WEIGHTS / math.sqrt(2 * math.pi)  # expectations over a standard normal


@dataclass(frozen=True)
class Design:
    conditions: tuple[str, ...]
    logits: tuple[float, ...]
    """mu_c per condition (log-odds at an average question)."""
    question_sd: float = 2.0
    interaction_sd: float = 0.0
    repeats: int = 1

    def __post_init__(self) -> None:
        if len(self.conditions) != len(self.logits):
            raise ValueError("one logit per condition")

    def mu(self, c: str) -> float:
        return self.logits[self.conditions.index(c)]


def simulate(design: Design, n_questions: int, n_studies: int, seed: int) -> np.ndarray:
    """Correctness, bool (studies, conditions, questions, runs); fresh questions in every study."""
    rng = np.random.default_rng(seed)
    mu = np.asarray(design.logits)[None, :, None]
    u = rng.normal(0.0, design.question_sd, (n_studies, 1, n_questions))
    eta = mu + u
    if design.interaction_sd > 0:
        eta = eta + rng.normal(0.0, design.interaction_sd, (n_studies, len(design.logits), n_questions))
    p: np.ndarray = expit(eta)
    return rng.random((*p.shape, design.repeats)) < p[..., None]


def aligned_study(design: Design, y: np.ndarray) -> Aligned:
    """One simulated study (conditions, questions, runs) as the `Aligned` the statistics take."""
    return Aligned(design.conditions, tuple(range(y.shape[1])), y, dropped=0)


def _moments(design: Design, c: str) -> tuple[np.ndarray, np.ndarray]:
    """E_v[pi] and E_v[pi^2] at each quadrature node of u: the condition's chance given difficulty."""
    u = design.question_sd * _NODES[:, None]
    v = design.interaction_sd * _NODES[None, :]
    p = expit(design.mu(c) + u + v)
    return p @ _WEIGHTS, (p**2) @ _WEIGHTS


def implied_accuracy(design: Design, c: str) -> float:
    return float(_moments(design, c)[0] @ _WEIGHTS)


def implied_discordance(design: Design, a: str, b: str) -> Discordance:
    """Population P(b right, a wrong) and P(a right, b wrong) for one run of each."""
    ma, mb = _moments(design, a)[0], _moments(design, b)[0]
    return Discordance(b_only=float((mb * (1 - ma)) @ _WEIGHTS), a_only=float((ma * (1 - mb)) @ _WEIGHTS))


def implied_contrast(design: Design, weights: Mapping[str, float]) -> tuple[float, float]:
    """Population mean and second moment E[d^2] of the per-question contrast sum_c w_c * mean_k y_qck."""
    k = design.repeats
    mean_u = np.zeros_like(_NODES)
    var_u = np.zeros_like(_NODES)
    for c, w in weights.items():
        m1, m2 = _moments(design, c)
        mean_u += w * m1
        # Var(mean over k runs | u) = Var_v(pi) + E_v[pi (1 - pi)] / k; conditions independent given u.
        var_u += w**2 * ((m2 - m1**2) + (m1 - m2) / k)
    return float(mean_u @ _WEIGHTS), float((var_u + mean_u**2) @ _WEIGHTS)


def logits_for(accuracies: Sequence[float], question_sd: float, interaction_sd: float = 0.0) -> tuple[float, ...]:
    """The mu_c that give each stated population accuracy under this difficulty model."""
    def gap(mu: float, acc: float) -> float:
        return implied_accuracy(Design(("x",), (mu,), question_sd, interaction_sd), "x") - acc

    out = []
    for acc in accuracies:
        if not 0 < acc < 1:
            raise ValueError(f"accuracy must lie in (0, 1), got {acc}")
        out.append(float(optimize.brentq(gap, -30.0, 30.0, args=(acc,), xtol=1e-12)))
    return tuple(out)
