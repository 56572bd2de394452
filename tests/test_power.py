"""The planner: exact McNemar power by enumeration, Connor by hand, sample sizes, the 2x2 plan,
cost and wall time by hand, and the power figures against simulated studies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medpanel.experiments.analysis.inference.ledger import LedgerLine
from medpanel.experiments.analysis.inference.paired_data import align
from medpanel.experiments.analysis.inference.plan import (
    CostProfile,
    cost_projection,
    plan_2x2,
    profiles_from_ledger,
    wall_time_s,
)
from medpanel.experiments.analysis.inference.power import (
    Discordance,
    contrast_power,
    detectable_effect,
    discordance_from_accuracy,
    discordance_from_pilot,
    mcnemar_power,
    mcnemar_sample_size,
    second_moments,
)
from medpanel.experiments.analysis.inference.resample import mcnemar_pvalue

CELLS = {(0, 0): "c0r0", (0, 1): "c0r1", (1, 0): "c1r0", (1, 1): "c1r1"}


def _enumerated_power(n: int, disc: Discordance, alpha: float) -> float:
    """Sum over every (b_only, a_only) outcome of its multinomial probability when the test rejects."""
    total = 0.0
    for b in range(n + 1):
        for a in range(n - b + 1):
            if mcnemar_pvalue(b, a) < alpha:
                rest = 1 - disc.rate
                total += (math.comb(n, b) * math.comb(n - b, a) * disc.b_only**b * disc.a_only**a
                          * rest ** (n - a - b))
    return total


def test_exact_power_is_the_enumerated_power() -> None:
    for n, disc, alpha in [(25, Discordance(0.3, 0.1), 0.05), (40, Discordance(0.2, 0.15), 0.05),
                           (30, Discordance(0.05, 0.25), 0.01)]:
        assert mcnemar_power(n, disc, alpha=alpha) == pytest.approx(_enumerated_power(n, disc, alpha), abs=1e-12)


def test_connor_by_hand() -> None:
    # sqrt(500) * 0.04 = 0.894427; 1.959964 * sqrt(0.16) = 0.783986; sqrt(0.16 - 0.0016) = 0.397995;
    # Phi((0.894427 - 0.783986) / 0.397995) = Phi(0.277494) = 0.60930.
    assert mcnemar_power(500, Discordance(0.10, 0.06), method="connor") == pytest.approx(0.60930, abs=1e-4)


def test_contrast_power_continuity_correction_by_hand() -> None:
    # sqrt(862) * 0.03 = 0.880795; 1.959964 * sqrt(0.32) = 1.108723; half a lattice step of the
    # mean: 1 / sqrt(862) = 0.034060; sd sqrt(0.32 - 0.0009) = 0.564889.
    # Phi((0.880795 - 1.108723 - 0.034060) / 0.564889) = Phi(-0.463787) = 0.32140, + 0.00017 far tail.
    assert contrast_power(862, 0.03, 0.32) == pytest.approx(0.321571, abs=1e-5)
    assert contrast_power(862, 0.03, 0.32, scale=None) == pytest.approx(0.343508, abs=1e-5)  # uncorrected
    assert contrast_power(862, 0.03, 0.32, scale=4) < contrast_power(862, 0.03, 0.32, scale=None)


def test_discordance_from_assumptions_by_hand() -> None:
    d = discordance_from_accuracy(0.20, 0.03, rho=0.0)  # independent: both right 0.2 * 0.23 = 0.046
    assert (d.b_only, d.a_only) == pytest.approx((0.23 - 0.046, 0.20 - 0.046))
    same = discordance_from_accuracy(0.4, 0.0, rho=1.0)
    assert same.rate == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="impossible discordance"):
        discordance_from_accuracy(0.2, 0.3, rho=1.0)  # 0.5 right with phi = 1 cannot contain 0.2


def test_sample_size_and_detectable_effect_are_consistent() -> None:
    disc = Discordance(0.09, 0.06)
    n = mcnemar_sample_size(disc)
    assert mcnemar_power(n, disc) >= 0.8 > mcnemar_power(n - 1, disc)
    assert mcnemar_sample_size(disc, method="connor") < n  # Connor is a little optimistic at small n
    delta = detectable_effect(862, 0.15)
    hit = Discordance((0.15 + delta) / 2, (0.15 - delta) / 2)
    assert mcnemar_power(862, hit) == pytest.approx(0.8, abs=2e-3)
    assert math.isnan(detectable_effect(20, 0.01))  # 20 questions, 1% discordant: nothing is detectable


def test_exact_power_against_simulated_mcnemar() -> None:
    """Stated assumptions -> 20,000 simulated studies of 862 questions -> rejection rate."""
    disc = discordance_from_accuracy(0.20, 0.03, rho=0.5)
    rng = np.random.default_rng(11)
    counts = rng.multinomial(862, [disc.b_only, disc.a_only, 1 - disc.rate], size=20_000)
    observed = float(np.mean(mcnemar_pvalue(counts[:, 0], counts[:, 1]) < 0.05))
    predicted = mcnemar_power(862, disc)
    print(f"\nMcNemar power, 862 q, acc 20%, +3 pts, phi 0.5 (p_d {disc.rate:.3f}): "
          f"predicted {predicted:.3f} (Connor {mcnemar_power(862, disc, method='connor'):.3f}), "
          f"simulated {observed:.3f}")
    assert abs(observed - predicted) < 0.015  # 4 simulation SEs; the brief allows 0.05


def test_plan_from_assumptions() -> None:
    rows = {r.comparison: r for r in plan_2x2(CELLS, 862, 3.0, discordance_rate=0.12)}
    main, inter, pair = rows["c main effect"], rows["c x r interaction"], rows["c1r0 - c0r0"]
    assert main.rate == pytest.approx(0.06) and inter.rate == pytest.approx(0.24) and pair.rate == 0.12
    assert main.alpha == pytest.approx(0.05 / 3) and pair.alpha == pytest.approx(0.05 / 4)
    # A z test needs n ~ m2 / effect^2: the interaction (m2 = 2 p_d) about 4x the main effect (p_d / 2).
    assert inter.n_needed / main.n_needed == pytest.approx(4.0, rel=0.03)
    assert main.power_at_n == pytest.approx(contrast_power(862, 0.03, 0.06, alpha=0.05 / 3, scale=2))
    assert pair.power_at_n == pytest.approx(mcnemar_power(862, Discordance(0.075, 0.045), alpha=0.0125))
    assert pair.n_needed == mcnemar_sample_size(Discordance(0.075, 0.045), alpha=0.0125)
    assert inter.warning.startswith(f"862 questions cannot resolve 3 points (needs {inter.n_needed:,}); they resolve")
    assert main.n_needed <= 862 and main.warning == ""
    with pytest.raises(ValueError, match="either a pilot or a discordance rate"):
        plan_2x2(CELLS, 862, 3.0)


def test_plan_from_a_pilot_by_hand() -> None:
    # 4 questions: c0r0 0 0 1 1 | c0r1 0 1 1 1 | c1r0 1 0 1 1 | c1r1 1 1 1 0
    cols = {"c0r0": [0, 0, 1, 1], "c0r1": [0, 1, 1, 1], "c1r0": [1, 0, 1, 1], "c1r1": [1, 1, 1, 0]}
    pilot = align({c: {q: bool(v) for q, v in enumerate(vs)} for c, vs in cols.items()}, list(cols))
    # c main per question: (1 + 1)/2, (0 + 0)/2, 0, (0 - 1)/2 -> squares 1, 0, 0, 0.25 -> mean 0.3125
    m2 = second_moments(pilot, {"c": {"c1r0": .5, "c1r1": .5, "c0r0": -.5, "c0r1": -.5}})
    assert m2["c"] == pytest.approx(0.3125)
    d = discordance_from_pilot(pilot, "c0r0", "c1r0")
    assert (d.b_only, d.a_only) == (0.25, 0.0)
    rows = {r.comparison: r for r in plan_2x2(CELLS, 862, 10.0, pilot=pilot)}
    assert rows["c main effect"].rate == pytest.approx(0.3125)
    assert rows["c1r0 - c0r0"].rate == pytest.approx(0.25) and rows["c1r0 - c0r0"].kind == "pair"


def test_cost_and_wall_time_by_hand() -> None:
    prices = {"m": type("P", (), {"input": 0.15, "output": 0.60})()}
    profiles = [CostProfile("c0r0", "m", 10, 20_000, 2_000), CostProfile("c1r1", "m", 16, 40_000, 3_000)]
    rows = cost_projection(profiles, 862, prices, repeats=2)
    # c0r0: 1724 runs x (20,000 x 0.15 + 2,000 x 0.60) / 1e6 = 1724 x 0.0042 = 7.2408 USD
    assert rows[0]["sent_calls"] == 17_240 and rows[0]["usd"] == pytest.approx(7.2408)
    # c1r1: 1724 x (0.006 + 0.0018) = 13.4472 USD
    assert rows[1]["usd"] == pytest.approx(13.4472) and rows[1]["tokens"] == 1724 * 43_000
    assert rows[2] == {"condition": "total", "questions": 862, "repeats": 2, "sent_calls": 17_240 + 27_584,
                       "tokens": pytest.approx(1724 * 65_000), "usd": pytest.approx(20.688)}
    # 26 calls a question x 862 x 1 run x 2 s / 8 workers = 5,603 s
    assert wall_time_s(profiles, 862, latency_s=2.0, workers=8) == pytest.approx(26 * 862 * 2 / 8)
    assert math.isnan(cost_projection(profiles, 10, {})[0]["usd"])
    pilot = {"c0r0": LedgerLine("c0r0", "all", "all", calls=40, prompt_tokens=8000, completion_tokens=800,
                                cache_hits=10, cache_prompt_tokens=2000, cache_completion_tokens=200)}
    sent = profiles_from_ledger(pilot, {"c0r0": 4}, "m")[0]
    asked = profiles_from_ledger(pilot, {"c0r0": 4}, "m", with_cache=False)[0]
    assert (sent.sent_calls_per_q, sent.prompt_tokens_per_q, sent.completion_tokens_per_q) == (10, 2000, 200)
    assert (asked.sent_calls_per_q, asked.prompt_tokens_per_q, asked.completion_tokens_per_q) == (12.5, 2500, 250)


def test_sample_size_of_a_rate_too_small_for_the_effect_is_refused_at_once() -> None:
    """A pilot whose two cells never disagree (rate 0) cannot carry a 3-point effect; planning it
    must say so, not walk to n_max one question at a time (it hung `medpanel plan --pilot`)."""
    from medpanel.experiments.analysis.inference.power import contrast_sample_size

    with pytest.raises(ValueError, match="E\\[d\\^2\\]"):
        contrast_sample_size(0.03, 0.0)
