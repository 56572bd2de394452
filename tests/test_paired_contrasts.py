"""Hand-computed checks of the resampling engine, the exact tests, Holm and Table 3's contrast."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from medpanel.experiments.analysis.inference import resample
from medpanel.experiments.analysis.inference.contrasts import (
    Contrast,
    adjust,
    compute_contrasts,
    holm,
    pair_family,
)
from medpanel.experiments.analysis.inference.paired_data import Aligned, align, correctness_from_rows
from medpanel.experiments.analysis.inference.resample import mcnemar_pvalue, resample_cell_means, sign_flip_pvalue
from medpanel.methods.panel.contrast import channel_addition


def _brute_sign_flip(d: list[float]) -> float:
    """P(|sum s_i |d_i|| >= |sum d_i|) over all 2^n sign vectors: the definition, enumerated."""
    mags = np.abs(d)
    t_obs = abs(sum(d))
    hits = sum(abs(np.dot(s, mags)) >= t_obs - 1e-9 for s in itertools.product([1, -1], repeat=len(d)))
    return hits / 2 ** len(d)


def test_sign_flip_hand_computed() -> None:
    # Magnitudes 1, 1, 2, all positive: only (+,+,+) and (-,-,-) reach |T| = 4 -> 2/8.
    assert sign_flip_pvalue(np.array([1, 1, 2]), 1) == pytest.approx(0.25)
    # d = 2, 1, -1: T over the sign vectors is 4, 2, 2, 0, 0, -2, -2, -4 and t_obs = 2 -> 6/8.
    assert sign_flip_pvalue(np.array([2, 1, -1]), 1) == pytest.approx(0.75)
    # Halves (a main effect) need scale 2; 0.5 and 1 all positive -> 2/4.
    assert sign_flip_pvalue(np.array([0.5, 1.0, 0.0]), 2) == pytest.approx(0.5)
    assert sign_flip_pvalue(np.zeros(5), 1) == 1.0
    with pytest.raises(ValueError, match="multiples of 1/1"):
        sign_flip_pvalue(np.array([0.5, 1.0]), 1)


def test_sign_flip_matches_enumeration() -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        d = (rng.integers(-3, 4, size=12) / 3).tolist()  # means over 3 runs
        assert sign_flip_pvalue(np.array(d), 3) == pytest.approx(_brute_sign_flip(d), abs=1e-12)


def test_sign_flip_fft_path_agrees_with_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    d = rng.integers(-10, 11, size=400) / 5 + 0.3 * (rng.random(400) < 0.5)
    d = np.round(d * 10) / 10
    direct = sign_flip_pvalue(d, 10)
    monkeypatch.setattr(resample, "_DIRECT_MAX", 0)
    assert sign_flip_pvalue(d, 10) == pytest.approx(direct, rel=1e-9, abs=1e-12)


def test_single_magnitude_is_mcnemar() -> None:
    for b, a in [(3, 0), (6, 1), (10, 10), (0, 7), (25, 12)]:
        d = np.array([1] * b + [-1] * a + [0] * 5)
        expected = stats.binomtest(b, b + a, 0.5).pvalue
        assert sign_flip_pvalue(d, 1) == pytest.approx(expected)
        assert mcnemar_pvalue(b, a) == pytest.approx(expected)
    assert mcnemar_pvalue(3, 0) == pytest.approx(0.25)  # 2 * 0.5**3
    assert mcnemar_pvalue(6, 1) == pytest.approx(0.125)  # 2 * (1 + 7) / 2**7
    assert mcnemar_pvalue(0, 0) == 1.0
    many = mcnemar_pvalue(np.array([3, 6, 0]), np.array([0, 1, 0]))
    assert np.allclose(many, [0.25, 0.125, 1.0])


def test_bootstrap_variance_is_the_bootstrap() -> None:
    """The pattern-multinomial resample has the plug-in variance var(x) / n of the ordinary
    bootstrap, on both paths (few patterns: multinomial; many: drawn indices)."""
    rng = np.random.default_rng(0)
    for n, k in [(500, 1), (30, 7)]:  # 4 patterns of 500 questions; ~30 distinct patterns of 30
        s = rng.integers(0, k + 1, size=(n, 2))
        draws = resample_cell_means(s, k, n_boot=40_000, seed=1)
        x = s / k
        assert np.allclose(draws.mean(axis=0), x.mean(axis=0), atol=4 * x.std(axis=0).max() / math.sqrt(n * 40_000))
        assert np.allclose(draws.var(axis=0), x.var(axis=0) / n, rtol=0.03)
        # Pairing: the resampled difference has the variance of the per-question differences.
        assert (draws[:, 1] - draws[:, 0]).var() == pytest.approx((x[:, 1] - x[:, 0]).var() / n, rel=0.03)


def test_two_level_variance() -> None:
    """Resampling runs within each drawn question adds mean(p(1-p)) / K to the question-level term."""
    rng = np.random.default_rng(2)
    n, k = 200, 5
    s = rng.integers(0, k + 1, size=(n, 1))
    p = s[:, 0] / k
    draws = resample_cell_means(s, k, n_boot=40_000, seed=3, two_level=True)
    expected = (p.var() + np.mean(p * (1 - p)) / k) / n
    assert draws.var() == pytest.approx(expected, rel=0.03)
    assert draws.mean() == pytest.approx(p.mean(), abs=1e-3)


def _aligned(rows: dict[str, list[int]]) -> Aligned:
    return align({c: {q: bool(v) for q, v in enumerate(vals)} for c, vals in rows.items()}, list(rows))


def test_contrast_degenerate_cases() -> None:
    spec = [("b - a", {"b": 1.0, "a": -1.0}, ("up", "down"))]
    same = compute_contrasts(_aligned({"a": [1, 1, 1, 1], "b": [1, 1, 1, 1]}), spec, n_boot=200)[0]
    assert (same.estimate, same.ci_low, same.ci_high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert "no discordance" in same.note
    one = compute_contrasts(_aligned({"a": [0], "b": [1]}), spec, n_boot=200)[0]
    assert one.estimate == 100.0 and math.isnan(one.ci_low) and "fewer than 2 questions" in one.note
    empty = compute_contrasts(align({"a": {1: True}, "b": {2: True}}, ["a", "b"]), spec)[0]
    assert empty.n == 0 and math.isnan(empty.p_value) and "2 left out" in empty.note
    assert adjust([empty])[0].verdict == "not tested"


def test_holm_hand_computed_and_verdict() -> None:
    # Sorted 0.01, 0.03, 0.04 -> 3 * 0.01, 2 * 0.03, max(0.06, 1 * 0.04): [0.03, 0.06, 0.06].
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.2, math.nan]) == pytest.approx([0.2, math.nan], nan_ok=True)

    def c(name: str, p: float, est: float) -> Contrast:
        return Contrast(name, {}, 100, 1, est, est - 1, est + 1, p, "t", "questions", ("b better", "a better"),
                        draws=np.linspace(est - 3, est + 3, 1001))

    out = adjust([c("x", 0.01, 2.0), c("y", 0.04, -2.0), c("z", 0.03, 1.0)])
    assert [o.verdict for o in out] == ["b better", "no detectable difference", "no detectable difference"]
    assert [o.m for o in out] == [3, 3, 3]
    # Raw p = 0.04 alone would pass at 0.05: the verdict reads the adjusted value.
    assert out[1].contrast.p_value < 0.05 < out[1].p_holm
    # The Bonferroni interval (level 1 - 0.05/3) is wider than the raw 95% one.
    assert out[0].adj_level == pytest.approx(1 - 0.05 / 3)
    assert out[0].adj_low < out[0].contrast.ci_low and out[0].adj_high > out[0].contrast.ci_high


def test_holm_equals_statsmodels_on_random_families_with_ties_and_nan() -> None:
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(7)
    for m in (1, 2, 5, 18, 60):
        p = np.round(rng.uniform(0, 0.2, m), 3)  # rounding makes ties
        p[rng.integers(0, m)] = 1.0
        with_nan = [*p.tolist(), math.nan]
        expected = multipletests(p, method="holm")[1].tolist()
        assert holm(with_nan)[:-1] == pytest.approx(expected, abs=1e-12)
        assert math.isnan(holm(with_nan)[-1])
    assert holm([]) == []


def test_table3_channel_addition_hand_computed() -> None:
    n = 30
    base = [1 if q < 20 else 0 for q in range(n)]  # right on 0..19
    naive = [1 if q < 8 else 0 for q in range(n)]  # loses 8..19: a_only = 12, b_only = 0
    ind = [1 if q < 19 or q == 21 else 0 for q in range(n)]  # loses 19, gains 21
    data = {"c1r0k1": dict(enumerate(map(bool, base))), "c1r1k1": dict(enumerate(map(bool, naive))),
            "c1r1k1-ind": dict(enumerate(map(bool, ind)))}
    out = channel_addition(data, n_boot=2000)
    naive_row, ind_row = out
    assert naive_row.contrast.name == "c1r1k1 - c1r0k1"
    assert naive_row.contrast.estimate == pytest.approx(-40.0)  # 8/30 - 20/30
    assert (naive_row.contrast.b_only, naive_row.contrast.a_only) == (0, 12)
    assert naive_row.contrast.p_value == pytest.approx(2 * 0.5**12)
    assert naive_row.p_holm == pytest.approx(2 * 2 * 0.5**12)  # smallest of m = 2
    assert naive_row.verdict == "hurts"
    assert naive_row.contrast.ci_high <= 0  # never better on any question
    assert ind_row.contrast.estimate == 0.0 and (ind_row.contrast.b_only, ind_row.contrast.a_only) == (1, 1)
    assert ind_row.contrast.p_value == 1.0 and ind_row.verdict == "no detectable difference"


def test_pairs_use_every_repeat() -> None:
    """Run 0 alone shows no difference; the runs together do, and the test says so."""
    n = 12
    a = {q: [False, False, False] for q in range(n)}
    b = {q: [False, True, True] for q in range(n)}  # same as a in run 0, right in runs 1 and 2
    row = pair_family({"a": a, "b": b}, [("a", "b")], n_boot=2000)[0]
    c = row.contrast
    assert c.repeats == 3 and c.estimate == pytest.approx(100 * 2 / 3)
    assert c.test == "exact sign-flip on means over 3 runs"
    assert c.p_value == pytest.approx(2 * 0.5**12)  # 12 questions, all +2/3: 2 of 2^12 sign vectors
    assert row.verdict == "b better"
    run0 = pair_family({"a": {q: v[:1] for q, v in a.items()}, "b": {q: v[:1] for q, v in b.items()}},
                       [("a", "b")], n_boot=200)[0]
    assert run0.contrast.estimate == 0.0 and run0.verdict == "no question differs: nothing to test"
    assert run0.contrast.degenerate == "no question differs"
    assert c.degenerate == "the same difference on every question"  # every question +2/3: a [x, x] bootstrap


class _Row:
    def __init__(self, condition: str, qid: str, repeat: int, correct: bool) -> None:
        self.condition, self.qid, self.repeat, self.correct = condition, qid, repeat, correct

    @property
    def key(self) -> tuple[str, str]:
        return ("ds", self.qid)


def test_rows_to_aligned_counts_incomplete_questions() -> None:
    rows = [_Row(c, q, r, (q, r) != ("1", 1)) for c in ("a", "b") for q in ("1", "2", "3") for r in (0, 1)]
    rows = [r for r in rows if not (r.condition == "b" and r.qid == "3" and r.repeat == 1)]  # unfinished
    data = correctness_from_rows(rows)
    assert data["a"][("ds", "1")] == [True, False]
    al = align(data, ["a", "b"])
    assert al.keys == (("ds", "1"), ("ds", "2")) and al.dropped == 1 and al.repeats == 2
    assert al.successes().tolist() == [[1, 1], [2, 2]]
    first = align(data, ["a", "b"], repeats=1)
    assert first.n == 3 and first.dropped == 0
    with pytest.raises(ValueError, match="must be bool"):
        align({"a": {1: [True, None]}}, ["a"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no results for condition"):
        align({"a": {1: True}}, ["a", "zz"])
