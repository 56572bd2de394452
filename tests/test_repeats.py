"""Repeated runs by hand: flip rate, pass^k, accuracy over every run with both CIs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medpanel.experiments.analysis.inference.repeats import flip_rate, pass_hat_k, repeat_comparisons, repeat_summary

# Five questions, three runs each.
RUNS = {
    "q1": [1, 1, 1],
    "q2": [1, 0, 1],
    "q3": [0, 0, 0],
    "q4": [0, 1, 0],
    "q5": [1, 1, 0],
}


def test_flip_rate_and_pass_k_by_hand() -> None:
    y = np.array(list(RUNS.values()), dtype=bool)
    assert flip_rate(y) == pytest.approx(3 / 5)  # q2, q4, q5 change
    assert pass_hat_k(y, 3) == pytest.approx(1 / 5)  # only q1 right every time
    # pass^2 from 3 runs: mean of C(s, 2) / C(3, 2) with s = 3, 2, 0, 1, 2 -> (3 + 1 + 0 + 0 + 1) / 3 / 5
    assert pass_hat_k(y, 2) == pytest.approx(5 / 15)
    assert pass_hat_k(y, 1) == pytest.approx(8 / 15)  # plain accuracy
    with pytest.raises(ValueError, match="1 <= k <= runs"):
        pass_hat_k(y, 4)
    assert math.isnan(flip_rate(np.zeros((0, 3), dtype=bool)))


def test_repeat_summary_by_hand() -> None:
    data = {"c1": {q: [bool(v) for v in vs] for q, vs in RUNS.items()}}
    (s,) = repeat_summary(data, ["c1"], n_boot=4000)
    assert (s.n, s.repeats, s.flips) == (5, 3, 3)
    assert s.accuracy == pytest.approx(100 * 8 / 15)
    assert s.run_accuracies == pytest.approx([60.0, 60.0, 40.0])  # runs: 3/5, 3/5, 2/5
    assert s.run_sd == pytest.approx(float(np.std([60, 60, 40], ddof=1)))
    assert s.pass_all == pytest.approx(20.0) and s.flip_rate == pytest.approx(0.6)
    assert s.ci_low <= s.accuracy <= s.ci_high and s.ci2_low <= s.accuracy <= s.ci2_high
    # The two-level interval resamples the runs too, so it is no narrower.
    assert (s.ci2_high - s.ci2_low) >= (s.ci_high - s.ci_low) - 1e-9
    row = s.as_row()
    assert row["pass^3_%"] == pytest.approx(20.0) and row["per_run"] == "60.0 / 60.0 / 40.0"


def test_repeat_comparisons_use_every_run() -> None:
    a = {q: [bool(v) for v in vs] for q, vs in RUNS.items()}
    b = {q: [True, True, True] for q in RUNS}
    (row,) = repeat_comparisons({"a": a, "b": b}, [("a", "b")], n_boot=2000)
    # Per-question mean differences 0, 1/3, 1, 2/3, 1/3: mean 7/15.
    assert row.contrast.estimate == pytest.approx(100 * 7 / 15)
    assert row.contrast.p_value == pytest.approx(2 / 16)  # 4 non-zero, all positive: 2 of 2^4 sign vectors
    assert row.contrast.repeats == 3 and row.m == 1
