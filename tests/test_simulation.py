"""The statistics against planted truth: synthetic 2x2 studies of 862 questions with question
difficulty (logistic random intercept) and question x condition disagreement.

- CI coverage of the paired bootstrap (pair, main effect, interaction) over 2,000 studies;
- type-I error of McNemar and of the interaction and main-effect sign-flip tests under no effect;
- power of each test against the planner's prediction from the model's implied rates;
- with 3 runs per question: coverage of the question-level and the two-level CI.
Run with -s to see the figures.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from medpanel.experiments.analysis.inference.contrasts import compute_contrasts
from medpanel.experiments.analysis.inference.power import contrast_power, mcnemar_power
from medpanel.experiments.analysis.inference.resample import mcnemar_pvalue, sign_flip_pvalue
from medpanel.experiments.analysis.inference.simulate import (
    Design,
    aligned_study,
    implied_accuracy,
    implied_contrast,
    implied_discordance,
    logits_for,
    simulate,
)

CELLS = ("c0r0", "c0r1", "c1r0", "c1r1")
PAIR = {"c1r1": 1.0, "c1r0": -1.0}
MAIN = {"c1r0": 0.5, "c1r1": 0.5, "c0r0": -0.5, "c0r1": -0.5}
INTER = {"c1r1": 1.0, "c1r0": -1.0, "c0r1": -1.0, "c0r0": 1.0}
SPECS = [("pair", PAIR, ("+", "-")), ("main", MAIN, ("+", "-")), ("interaction", INTER, ("+", "-"))]
SCALE = {"pair": 1, "main": 2, "interaction": 1}
N = 862
QSD, ISD = 2.0, 1.0  # hard-set difficulty spread; persistent question x condition disagreement


def _design(accuracies: list[float], repeats: int = 1) -> Design:
    return Design(CELLS, logits_for(accuracies, QSD, ISD), QSD, ISD, repeats)


def _bound(s: int, alpha: float = 0.05) -> float:
    """alpha plus two simulation standard errors."""
    return alpha + 2 * math.sqrt(alpha * (1 - alpha) / s)


def test_implied_rates_match_the_generator() -> None:
    d = _design([0.18, 0.19, 0.20, 0.24])
    y = simulate(d, N, 400, seed=9)
    acc = y.mean(axis=(0, 2, 3))
    se = math.sqrt(0.2 * 0.8 / (N * 400)) * 3  # difficulty correlates questions, so allow 3x the iid SE
    assert acc == pytest.approx([0.18, 0.19, 0.20, 0.24], abs=4 * se)
    assert implied_accuracy(d, "c1r1") == pytest.approx(0.24, abs=1e-9)
    disc = implied_discordance(d, "c1r0", "c1r1")
    sim_b = float(np.mean(y[:, 3] & ~y[:, 2]))
    assert disc.b_only == pytest.approx(sim_b, abs=0.003) and disc.effect == pytest.approx(0.04, abs=1e-9)
    mean, m2 = implied_contrast(d, INTER)
    dq = y[:, 3].astype(float) - y[:, 2] - y[:, 1] + y[:, 0]
    assert mean == pytest.approx(0.03, abs=1e-9) and m2 == pytest.approx(float(np.mean(dq**2)), rel=0.01)


def test_coverage_and_power_against_the_planner() -> None:
    """Planted: c0r0 18%, c0r1 19%, c1r0 20%, c1r1 24% -> pair +4, main effect +3.5, interaction +3."""
    d = _design([0.18, 0.19, 0.20, 0.24])
    studies = 2000
    y = simulate(d, N, studies, seed=1)
    truth = {name: 100 * implied_contrast(d, w)[0] for name, w, _ in SPECS}
    covered = dict.fromkeys(truth, 0)
    rejected = dict.fromkeys(truth, 0)
    for s in range(studies):
        for c in compute_contrasts(aligned_study(d, y[s]), SPECS, n_boot=1000, seed=s):
            covered[c.name] += c.ci_low <= truth[c.name] <= c.ci_high
            rejected[c.name] += c.p_value < 0.05
    disc = implied_discordance(d, "c1r0", "c1r1")
    predicted = {"pair": mcnemar_power(N, disc)}
    for name, w, _ in SPECS[1:]:
        mean, m2 = implied_contrast(d, w)
        predicted[name] = contrast_power(N, mean, m2, scale=SCALE[name])
    print(f"\n{studies} studies x {N} questions")
    for name in truth:
        cov, pw = covered[name] / studies, rejected[name] / studies
        print(f"  {name:12s} truth {truth[name]:+.1f} pts  95% CI coverage {cov:.4f}  "
              f"power simulated {pw:.3f} predicted {predicted[name]:.3f}")
        assert 0.93 <= cov <= 0.97, name
        assert abs(pw - predicted[name]) < 0.05, name
    print(f"  pair, Connor's approximation: {mcnemar_power(N, disc, method='connor'):.3f}")


def test_type_one_error_under_no_effect() -> None:
    studies = 4000
    for label, accs in [("no effect", [0.2] * 4), ("c only (+4 pts)", [0.2, 0.2, 0.24, 0.24])]:
        d = _design(accs)
        y = simulate(d, N, studies, seed=2)
        # McNemar of r at c1 (no r effect in either design): the report's test, all studies at once.
        b_only = np.sum(y[:, 3, :, 0] & ~y[:, 2, :, 0], axis=1)
        a_only = np.sum(y[:, 2, :, 0] & ~y[:, 3, :, 0], axis=1)
        mcnemar = float(np.mean(mcnemar_pvalue(b_only, a_only) < 0.05))
        yf = y[..., 0].astype(np.int64)
        inter = yf[:, 3] - yf[:, 2] - yf[:, 1] + yf[:, 0]
        main_r = (yf[:, 1] + yf[:, 3] - yf[:, 0] - yf[:, 2]) / 2
        p_inter = np.array([sign_flip_pvalue(inter[s], 1) for s in range(studies)])
        p_main = np.array([sign_flip_pvalue(main_r[s], 2) for s in range(studies)])
        rates = {"McNemar (r at c1)": mcnemar, "interaction": float(np.mean(p_inter < 0.05)),
                 "r main effect": float(np.mean(p_main < 0.05))}
        print(f"\ntype-I error at alpha 0.05, {studies} studies, {label}: "
              + ", ".join(f"{k} {v:.4f}" for k, v in rates.items()) + f" (bound {_bound(studies):.4f})")
        for name, rate in rates.items():
            assert rate <= _bound(studies), (label, name)
        # Exact tests are conservative, but not absurdly so: each still rejects sometimes.
        assert min(rates.values()) > 0.02


def test_repeats_coverage_question_level_and_two_level() -> None:
    """Three runs per question (as the seed paper's Table 15); the per-question mean over runs is
    what is compared."""
    d = Design(("a", "b"), logits_for([0.20, 0.22], QSD, ISD), QSD, ISD, repeats=3)
    studies = 500
    y = simulate(d, N, studies, seed=5)
    spec = [("b - a", {"b": 1.0, "a": -1.0}, ("+", "-"))]
    truth = 100 * implied_contrast(d, spec[0][1])[0]
    mean, m2 = implied_contrast(d, spec[0][1])
    cover = {False: 0, True: 0}
    rejected = 0
    for s in range(studies):
        al = aligned_study(d, y[s])
        for two in (False, True):
            c = compute_contrasts(al, spec, n_boot=1000, seed=s, two_level=two)[0]
            cover[two] += c.ci_low <= truth <= c.ci_high
        rejected += c.p_value < 0.05
    one, two = cover[False] / studies, cover[True] / studies
    pw, predicted = rejected / studies, contrast_power(N, mean, m2, scale=3)
    print(f"\n3 runs, {studies} studies, truth {truth:+.1f} pts: coverage questions-only {one:.3f}, "
          f"two-level {two:.3f}; power of the sign-flip on run means simulated {pw:.3f} predicted {predicted:.3f}")
    assert 0.925 <= one <= 0.975  # 500 studies: 0.95 +- 2.5 SE
    assert two > one  # resampling runs again adds their variance a second time: conservative
    assert abs(pw - predicted) < 0.05
