"""The 2x2 factorial on hand-computed data: effects, exact p-values, Holm families, odds ratios,
and degenerate data that must give a reason instead of a crash."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.discrete.conditional_models import ConditionalLogit

from medpanel.experiments.analysis.inference.clustered_logit import GEE_MODEL, LOGIT_MODEL, _design, factorial_logit
from medpanel.experiments.analysis.inference.factorial import Grid, factorial_2x2, find_grids
from medpanel.experiments.analysis.inference.paired_data import align

CELLS = {(0, 0): "c0r0", (0, 1): "c0r1", (1, 0): "c1r0", (1, 1): "c1r1"}
GRID = Grid("c", "r", CELLS, {})

# Eight questions; columns c0r0 c0r1 c1r0 c1r1. Accuracies 25, 37.5, 75, 62.5 %.
TABLE = [
    (0, 0, 1, 1),
    (0, 0, 1, 1),
    (0, 1, 0, 1),
    (1, 1, 1, 1),
    (0, 0, 0, 0),
    (1, 0, 1, 0),
    (0, 0, 1, 0),
    (0, 1, 1, 1),
]


def _data(table: list[tuple[int, ...]], repeats: int = 1) -> dict[str, dict[int, list[bool]]]:
    return {slug: {q: [bool(row[j])] * repeats for q, row in enumerate(table)} for j, slug in enumerate(CELLS.values())}


def test_find_grids_in_the_seed_papers_seven_conditions() -> None:
    flags = {"c0r0": {"c": 0, "r": 0, "k": 0}, "c0r1": {"c": 0, "r": 1, "k": 0}, "c1r0": {"c": 1, "r": 0, "k": 0},
             "c1r1": {"c": 1, "r": 1, "k": 0}, "c1r0k1": {"c": 1, "r": 0, "k": 1}, "c1r1k1": {"c": 1, "r": 1, "k": 1},
             "c1r1k1-ind": {"c": 1, "r": 1, "k": 1, "variant": "ind"}}
    grids = find_grids(flags)
    assert [(g.label, g.cells) for g in grids] == [
        ("c x r (k=0)", {(0, 0): "c0r0", (0, 1): "c0r1", (1, 0): "c1r0", (1, 1): "c1r1"}),
        ("r x k (c=1)", {(0, 0): "c1r0", (0, 1): "c1r0k1", (1, 0): "c1r1", (1, 1): "c1r1k1"}),
    ]  # no c x k (c0 never has k1); the -ind variant never stands in for c1r1k1


def test_effects_hand_computed() -> None:
    f = factorial_2x2(_data(TABLE), GRID, n_boot=4000)
    assert f.n == 8 and f.repeats == 1
    assert {s: a[0] for s, a in f.cell_accuracy.items()} == {"c0r0": 25.0, "c0r1": 37.5, "c1r0": 75.0,
                                                              "c1r1": 62.5}
    rows = {r["contrast"]: r for r in (e.as_row() for e in f.effects)}
    main_c, main_r, inter = rows["c main effect"], rows["r main effect"], rows["c x r interaction"]
    assert main_c["estimate_pts"] == pytest.approx(37.5)  # ((75 - 25) + (62.5 - 37.5)) / 2
    assert main_r["estimate_pts"] == pytest.approx(0.0)  # ((37.5 - 25) + (62.5 - 75)) / 2
    assert inter["estimate_pts"] == pytest.approx(-25.0)  # (62.5 - 75) - (37.5 - 25)
    # Per question the c effect is 1, 1, 0, 0, 0, 0, 0.5, 0.5: only all + or all - reach it -> 2/16.
    assert main_c["p_raw"] == pytest.approx(0.125) and main_c["test"] == "exact sign-flip"
    assert main_r["p_raw"] == pytest.approx(1.0)  # +1, -1, -0.5, +0.5 sum to 0
    assert inter["p_raw"] == pytest.approx(0.5)  # -1 on questions 7 and 8 only: 2 / 4
    # Holm over the three factorial effects: 3 * 0.125, then 1, 1.
    assert [main_c["p_holm"], main_r["p_holm"], inter["p_holm"]] == pytest.approx([0.375, 1.0, 1.0])
    assert main_c["m"] == 3
    simple = [rows[k] for k in ("c1r0 - c0r0 (c at r0)", "c1r1 - c0r1 (c at r1)", "c0r1 - c0r0 (r at c0)",
                                "c1r1 - c1r0 (r at c1)")]
    assert [(r["b_only"], r["a_only"]) for r in simple] == [(4, 0), (2, 0), (2, 1), (1, 2)]
    assert [r["estimate_pts"] for r in simple] == pytest.approx([50.0, 25.0, 12.5, -12.5])
    assert [r["p_raw"] for r in simple] == pytest.approx([0.125, 0.5, 1.0, 1.0])  # exact McNemar
    assert {r["test"] for r in simple} == {"exact McNemar"}
    assert [r["p_holm"] for r in simple] == pytest.approx([0.5, 1.0, 1.0, 1.0])  # Holm over the 4 simple effects
    assert simple[0]["ci_low"] >= 0.0  # c never hurts at r0 on any question, so no resample is below 0
    assert all(r["verdict"] == "no detectable difference" for r in rows.values())


def test_gee_odds_ratios_are_the_cell_odds() -> None:
    """Every question has all four cells, so GEE's saturated model fits each cell's own accuracy:
    odds 1/3, 3/5, 3, 5/3 -> OR_c = sqrt(9 * 25/9) = 5, OR_r = sqrt(1.8 * 5/9) = 1, ratio = (25/9) / 9."""
    for repeats in (1, 3):
        ors = factorial_logit(align(_data(TABLE, repeats), list(CELLS.values())), CELLS, ("c", "r"))
        gee = {o.term: o for o in ors if o.model == GEE_MODEL}
        assert gee["c (main)"].odds_ratio == pytest.approx(5.0, rel=1e-5)
        assert gee["r (main)"].odds_ratio == pytest.approx(1.0, rel=1e-5)
        assert gee["c x r (ratio of ORs)"].odds_ratio == pytest.approx(25 / 81, rel=1e-5)
        assert all(o.ci_low < o.odds_ratio < o.ci_high for o in gee.values())


def test_conditional_logit_equals_statsmodels_on_every_question() -> None:
    """The weighted fit over distinct patterns is statsmodels' fit over all questions."""
    rng = np.random.default_rng(5)
    u = rng.normal(0, 1.5, 300)
    table = [tuple(int(rng.random() < 1 / (1 + np.exp(-(ui + 0.6 * a + 0.2 * b - 0.3 * a * b)))) for a, b in CELLS)
             for ui in u]
    al = align(_data(table), list(CELLS.values()))
    ours = [o for o in factorial_logit(al, CELLS, ("c", "r")) if o.model == LOGIT_MODEL]
    y, x, g = _design(al, CELLS)
    right = np.bincount(g, weights=y)
    keep = np.isin(g, np.flatnonzero((right > 0) & (right < 4)))
    ref = ConditionalLogit(y[keep], x[keep], groups=g[keep]).fit(method="newton", disp=0)
    assert [o.odds_ratio for o in ours] == pytest.approx(np.exp(ref.params).tolist(), rel=1e-4)
    assert [o.ci_low for o in ours] == pytest.approx(np.exp(ref.conf_int()[:, 0]).tolist(), rel=1e-3)
    assert [o.p_value for o in ours] == pytest.approx(ref.pvalues.tolist(), rel=1e-3, abs=1e-6)


def test_all_correct_gives_reasons_not_crashes() -> None:
    f = factorial_2x2(_data([(1, 1, 1, 1)] * 6), GRID, n_boot=500)
    for r in (e.as_row() for e in f.effects):
        assert (r["estimate_pts"], r["ci_low"], r["ci_high"], r["p_raw"]) == (0.0, 0.0, 0.0, 1.0)
        assert "no discordance" in r["note"] and r["verdict"] == "no question differs: nothing to test"
    assert len(f.odds_ratios) == 6
    assert all(math.isnan(o.odds_ratio) and o.note == "every answer is right: nothing to model" for o in f.odds_ratios)


def test_separation_and_no_informative_question() -> None:
    # c0r0 never right: its odds are 0 and every odds ratio with it is unbounded.
    table = [(0, 1, 1, 0), (0, 0, 1, 1), (0, 1, 0, 1), (0, 0, 1, 0), (0, 1, 1, 1)]
    ors = factorial_logit(align(_data(table), list(CELLS.values())), CELLS, ("c", "r"))
    assert {o.note for o in ors if o.model == GEE_MODEL} == {"c0r0 is all wrong: odds ratios unbounded (separation)"}
    assert {o.note for o in ors if o.model == LOGIT_MODEL} == {
        "among questions with both outcomes, c0r0 is all wrong: odds ratios unbounded (separation)"}
    # Every question the same in all four cells: GEE has a c0r0 with both outcomes? No: each cell
    # copies the same column, so GEE is fine but the conditional logit has nothing to condition on.
    same = [(1, 1, 1, 1), (0, 0, 0, 0), (1, 1, 1, 1)]
    ors = factorial_logit(align(_data(same), list(CELLS.values())), CELLS, ("c", "r"))
    assert {o.note for o in ors if o.model == LOGIT_MODEL} == {"no question with both a right and a wrong answer"}
    f = factorial_2x2(_data(same), GRID, n_boot=200)
    assert all("no discordance" in r["note"] for r in (e.as_row() for e in f.effects))
    # The cells share no question: nothing is tested, and every row says why.
    apart = {slug: {(slug, 1): True, (slug, 2): False} for slug in CELLS.values()}
    f = factorial_2x2(apart, GRID, n_boot=200)
    assert f.n == 0 and f.dropped == 8
    assert all(r["verdict"] == "not tested" and "8 left out" in r["note"] for r in (e.as_row() for e in f.effects))
    assert {o.note for o in f.odds_ratios} == {"no question answered in every cell"}


def test_quasi_separation_within_questions() -> None:
    """No cell is all right or all wrong, but within every informative question the right answers
    sit in the c1 cells first: the conditional odds ratio of c is infinite. GEE, which compares
    cell margins, still has a finite one."""
    table = [(1, 0, 1, 1), (0, 1, 1, 1), (0, 0, 0, 1), (0, 0, 1, 0), (0, 0, 1, 1), (1, 1, 1, 1), (0, 0, 0, 0)] * 3
    ors = factorial_logit(align(_data(table), list(CELLS.values())), CELLS, ("c", "r"))
    assert {o.note for o in ors if o.model == LOGIT_MODEL} == {
        "no finite odds ratios (quasi-separation: singular Hessian)"}
    gee = {o.term: o.odds_ratio for o in ors if o.model == GEE_MODEL}
    # c0 cells right on 2 of 7 patterns (odds 2/5), c1 cells on 5 of 7 (odds 5/2): OR 6.25 at r0 and r1.
    assert gee["c (main)"] == pytest.approx(6.25) and gee["r (main)"] == pytest.approx(1.0)


def test_repeats_use_every_run_and_skip_the_conditional_logit() -> None:
    data = _data(TABLE, repeats=2)
    for q in range(8):  # run 1 of c1r1 always right: c1r1's accuracy over both runs is (5 + 8) / 16
        data["c1r1"][q][1] = True
    f = factorial_2x2(data, GRID, n_boot=1000)
    assert f.repeats == 2 and f.cell_accuracy["c1r1"][0] == pytest.approx(100 * 13 / 16)
    rows = {r["contrast"]: r for r in (e.as_row() for e in f.effects)}
    assert rows["c x r interaction"]["estimate_pts"] == pytest.approx((81.25 - 75) - (37.5 - 25))
    assert rows["c x r interaction"]["test"] == "exact sign-flip on means over 2 runs"
    clogit = [o for o in f.odds_ratios if o.model == LOGIT_MODEL]
    assert all(math.isnan(o.odds_ratio) and "not fitted with repeats" in o.note for o in clogit)
    assert all(not math.isnan(o.odds_ratio) for o in f.odds_ratios if o.model == GEE_MODEL)
