"""Hand-computed checks for experiments/stats.py."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

from medpanel.experiments.analysis.stats import (
    BATCH,
    PairedComparison,
    accuracy_ci,
    accuracy_cis,
    format_points,
    mean_sd,
    paired_comparison,
    paired_comparisons,
    percentile_bootstrap,
    percentile_bootstraps,
    wilson_ci,
)


def _results(right: set[int], n: int = 10) -> dict[tuple[str, int], bool]:
    """Correctness per (dataset, qid) for questions 1..n, right on exactly `right`."""
    return {("ds", q): q in right for q in range(1, n + 1)}


def test_hand_computed_b_only_three() -> None:
    a = _results({1, 2, 3, 4})
    b = _results({1, 2, 3, 4, 5, 6, 7})
    c = paired_comparison("base", a, "panel", b, n_boot=2000)
    assert (c.a, c.b, c.n) == ("base", "panel", 10)
    assert c.acc_a == pytest.approx(0.4)
    assert c.acc_b == pytest.approx(0.7)
    assert c.diff_points == pytest.approx(30.0)
    assert (c.b_only, c.a_only) == (3, 0)
    # Exact McNemar: 3 discordant, all favour b -> 2 * 0.5**3.
    assert c.p_mcnemar == pytest.approx(0.25)
    # b is never worse on any question, so no resample can make the difference negative.
    assert 0.0 <= c.ci_low <= c.diff_points <= c.ci_high
    assert c.verdict == "no detectable difference"  # p = 0.25 is not significant


def test_hand_computed_six_vs_one() -> None:
    a = _results({1, 2, 3})  # a alone right on 3
    b = _results({1, 2, 4, 5, 6, 7, 8, 9})  # b alone right on 4..9
    c = paired_comparison("a", a, "b", b, n_boot=2000)
    assert (c.b_only, c.a_only) == (6, 1)
    # 2 * sum_{k<=1} C(7, k) / 2**7 = 2 * 8 / 128.
    assert c.p_mcnemar == pytest.approx(2 * (math.comb(7, 0) + math.comb(7, 1)) / 2**7)
    assert c.p_mcnemar == pytest.approx(0.125)
    assert c.diff_points == pytest.approx(50.0)


def test_identical_conditions() -> None:
    a = _results({2, 3, 5})
    c = paired_comparison("a", a, "b", dict(a))
    assert (c.b_only, c.a_only) == (0, 0)
    assert c.p_mcnemar == 1.0
    assert (c.ci_low, c.ci_high) == (0.0, 0.0)
    assert c.diff_points == 0.0
    assert c.verdict == "no question differs: nothing to test"
    assert c.ci_text == "none: no discordant question"


def test_verdict_requires_ci_and_mcnemar() -> None:
    base = {"a": "x", "b": "y", "n": 100, "acc_a": 0.5, "acc_b": 0.6, "diff_points": 10.0, "b_only": 20}
    assert PairedComparison(**base, ci_low=2.0, ci_high=18.0, a_only=5, p_mcnemar=0.01).verdict == "b better"
    neg = {**base, "diff_points": -10.0}
    assert PairedComparison(**neg, ci_low=-18.0, ci_high=-2.0, a_only=5, p_mcnemar=0.01).verdict == "a better"
    # CI straddles 0 -> no verdict even with a small p.
    assert (
        PairedComparison(**base, ci_low=-1.0, ci_high=18.0, a_only=5, p_mcnemar=0.01).verdict
        == "no detectable difference"
    )
    # CI excludes 0 but McNemar p >= 0.05 -> no verdict.
    assert (
        PairedComparison(**base, ci_low=2.0, ci_high=18.0, a_only=5, p_mcnemar=0.05).verdict
        == "no detectable difference"
    )


def test_clear_difference_is_detected() -> None:
    a = _results(set(range(1, 21)), n=100)  # 20 %
    b = _results(set(range(1, 61)), n=100)  # 60 %, a superset of a
    c = paired_comparison("a", a, "b", b)
    assert (c.b_only, c.a_only) == (40, 0)
    assert c.ci_low > 0
    assert c.verdict == "b better"
    assert paired_comparison("b", b, "a", a).verdict == "a better"


def test_as_row_has_fields_and_verdict() -> None:
    c = paired_comparison("a", _results({1}), "b", _results({1, 2}), n_boot=500)
    row = c.as_row()
    assert row["a"] == "a" and row["b"] == "b" and row["n"] == 10
    assert row["b_only"] == 1 and row["a_only"] == 0
    assert row["verdict"] == c.verdict
    assert set(row) >= {"acc_a", "acc_b", "diff_points", "ci_low", "ci_high", "p_mcnemar"}


def test_alignment_uses_only_shared_keys() -> None:
    a = {("ds", 1): True, ("ds", 2): False, ("ds", 3): True, ("other", 9): True}
    b = {("ds", 1): True, ("ds", 2): True, ("ds", 3): False, ("ds", 4): True}
    c = paired_comparison("a", a, "b", b, n_boot=500)
    assert c.n == 3
    assert c.acc_a == pytest.approx(2 / 3)
    assert c.acc_b == pytest.approx(2 / 3)
    assert (c.b_only, c.a_only) == (1, 1)


def test_alignment_is_independent_of_dict_order() -> None:
    a = _results({1, 4, 6, 9}, n=30)
    b = _results({1, 2, 3, 5, 8, 9, 11, 20}, n=30)
    rev_a = dict(reversed(list(a.items())))
    rev_b = dict(reversed(list(b.items())))
    assert paired_comparison("a", a, "b", b) == paired_comparison("a", rev_a, "b", rev_b)


def test_bootstrap_is_reproducible_across_hash_seeds() -> None:
    # Set order of str keys changes with PYTHONHASHSEED; the CI for a fixed seed must not.
    code = (
        "from medpanel.experiments.analysis.stats import paired_comparison as pc\n"
        "a = {('ds', str(q)): q % 3 == 0 for q in range(40)}\n"
        "b = {('ds', str(q)): q % 2 == 0 for q in range(40)}\n"
        "c = pc('a', a, 'b', b, n_boot=500)\n"
        "print(c.ci_low, c.ci_high)\n"
    )
    outs = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": os.pathsep.join(sys.path)}
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.add(run.stdout)
    assert len(outs) == 1


def test_empty_intersection_raises() -> None:
    with pytest.raises(ValueError, match="share no questions"):
        paired_comparison("a", {("x", 1): True}, "b", {("y", 1): True})


def test_non_bool_values_rejected() -> None:
    with pytest.raises(ValueError, match="bool"):
        paired_comparison("a", {1: True, 2: None}, "b", {1: True, 2: False})
    with pytest.raises(ValueError, match="bool"):
        accuracy_ci([True, 0.5])  # type: ignore[list-item]


def test_accuracy_ci_contains_point_and_is_seeded() -> None:
    correct = [i % 3 != 0 for i in range(40)]  # 26 of 40
    acc, low, high = accuracy_ci(correct, n_boot=2000, seed=1)
    assert acc == pytest.approx(26 / 40)
    assert low < acc < high
    assert 0.0 <= low and high <= 1.0
    assert accuracy_ci(correct, n_boot=2000, seed=1) == (acc, low, high)
    # Endpoints sit on the 1/n lattice, so two seeds can agree by chance; ten seeds must not all agree.
    assert len({accuracy_ci(correct, n_boot=2000, seed=s) for s in range(10)}) > 1


def test_accuracy_ci_level_widens() -> None:
    correct = [i % 2 == 0 for i in range(50)]
    _, low95, high95 = accuracy_ci(correct, n_boot=4000)
    _, low99, high99 = accuracy_ci(correct, n_boot=4000, level=0.99)
    assert low99 < low95 and high99 > high95


def test_paired_ci_is_seeded() -> None:
    a = _results({1, 4, 6, 9, 12, 15}, n=40)
    b = _results({1, 2, 3, 5, 8, 9, 11, 20, 21, 30}, n=40)
    c1 = paired_comparison("a", a, "b", b, n_boot=2000, seed=3)
    assert c1.ci_low < c1.diff_points < c1.ci_high
    assert paired_comparison("a", a, "b", b, n_boot=2000, seed=3) == c1
    cis = {
        (c.ci_low, c.ci_high)
        for c in (paired_comparison("a", a, "b", b, n_boot=2000, seed=s) for s in range(10))
    }
    assert len(cis) > 1


def test_single_question_has_no_ci() -> None:
    acc, low, high = accuracy_ci([True])
    assert acc == 1.0 and math.isnan(low) and math.isnan(high)
    c = paired_comparison("a", {1: False}, "b", {1: True})
    assert math.isnan(c.ci_low) and math.isnan(c.ci_high)
    assert c.verdict == "no detectable difference"


def test_accuracy_ci_empty_raises() -> None:
    with pytest.raises(ValueError):
        accuracy_ci([])


def test_wilson_known_value() -> None:
    # Wilson 95 % for 4/10: (0.1682, 0.6873) by the textbook formula.
    low, high = wilson_ci(4, 10)
    assert low == pytest.approx(0.16818, abs=1e-4)
    assert high == pytest.approx(0.68732, abs=1e-4)


def test_mean_sd() -> None:
    assert mean_sd([0.2, 0.3, 0.4]) == pytest.approx((0.3, 0.1))
    m, sd = mean_sd([0.7])
    assert m == 0.7 and math.isnan(sd)
    with pytest.raises(ValueError):
        mean_sd([])


def test_format_points() -> None:
    assert format_points(3.24) == "+3.2"
    assert format_points(-0.05, digits=2) == "-0.05"
    assert format_points(30.0, signed=False) == "30.0"
    assert format_points(float("nan")) == "n/a"


def _scipy_percentile_ci(x: np.ndarray, n_boot: int, seed: int, level: float) -> tuple[float, float]:
    res = scipy_stats.bootstrap((x,), np.mean, n_resamples=n_boot, vectorized=True, confidence_level=level,
                                method="percentile", batch=BATCH, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@pytest.mark.skipif(not hasattr(scipy_stats, "quantile"), reason="SciPy before 1.15 takes np.percentile")
def test_percentile_bootstrap_is_scipys_to_the_bit() -> None:
    """The report's bootstrap draws the indices as int32 and gathers them with np.take; the interval
    must be the one SciPy's own bootstrap gives, bit for bit: 0/1 answers, repeat means in thirds,
    Gaussian scores, sizes and resample counts across the batch's edges, several levels."""
    g = np.random.default_rng(2026)
    for trial in range(120):
        n = int(g.integers(2, 1200))
        x = [g.integers(0, 2, n).astype(float), g.integers(-3, 4, n) / 3.0, g.normal(size=n)][trial % 3]
        n_boot = int(g.choice([37, 999, 1000, 1001, 2500]))
        seed, level = int(g.integers(0, 2**31)), float(g.choice([0.5, 0.9, 0.95, 0.99]))
        assert percentile_bootstrap(x, n_boot=n_boot, seed=seed, level=level) == _scipy_percentile_ci(
            x, n_boot, seed, level), (trial, n, n_boot, seed, level)


def test_percentile_bootstrap_report_size_matches_scipy() -> None:
    """The report's own case: 862 questions, 10,000 resamples, seed 0."""
    x = np.random.default_rng(7).integers(-3, 4, 862) / 3.0
    assert percentile_bootstrap(x, n_boot=10_000, seed=0, level=0.95) == _scipy_percentile_ci(x, 10_000, 0, 0.95)


def test_joint_bootstraps_are_each_samples_own() -> None:
    """Samples of one size share their resamples' draws in one call; each interval must still be
    the one its sample gets alone (and SciPy's), whatever else is in the call and in what order."""
    g = np.random.default_rng(11)
    xs = [g.integers(0, 2, 300).astype(float), g.integers(-3, 4, 300) / 3.0, g.normal(size=57),
          g.integers(0, 2, 300).astype(float), np.array([1.0]), g.normal(size=57)]
    joint = percentile_bootstraps(xs, n_boot=2500, seed=3, level=0.95)
    alone = [percentile_bootstrap(x, n_boot=2500, seed=3, level=0.95) for x in xs]
    assert repr(joint) == repr(alone)  # repr: every float exactly, and nan equal to nan
    assert joint[0] == _scipy_percentile_ci(xs[0], 2500, 3, 0.95)
    assert math.isnan(joint[4][0]) and math.isnan(joint[4][1])  # one observation: no interval
    assert repr(percentile_bootstraps(xs[::-1], n_boot=2500, seed=3, level=0.95)) == repr(alone[::-1])
    assert percentile_bootstraps([], n_boot=100, seed=0, level=0.95) == []


def test_joint_paired_comparisons_and_accuracies_match_one_at_a_time() -> None:
    a, b, c = _results({1, 2, 3, 5, 8}, 40), _results({2, 3, 4, 5, 9, 10, 11}, 40), _results({1, 7}, 12)
    pairs = [("a", a, "b", b), ("b", b, "a", a), ("a", a, "c", c)]
    assert paired_comparisons(pairs, n_boot=1500) == [paired_comparison(*p, n_boot=1500) for p in pairs]
    groups = [[True, False, True], [False] * 5 + [True] * 35, [True, True, False]]
    assert accuracy_cis(groups, n_boot=1500) == [accuracy_ci(g, n_boot=1500) for g in groups]
    with pytest.raises(ValueError, match="at least one result"):
        accuracy_cis([[True], []])
