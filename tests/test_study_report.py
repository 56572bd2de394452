"""The report's study tables (experiments/analysis/study.py) against hand-computed examples."""

from __future__ import annotations

import math
from typing import Any

import pytest

from medpanel.experiments.analysis import study
from medpanel.experiments.analysis.report import build_tables, paired_table
from medpanel.experiments.run.store.rows import Row
from medpanel.methods.panel.contrast import table3_contrast
from tests.run_records import run_record

FLAGS = {"c0r0": {"c": 0, "r": 0}, "c0r1": {"c": 0, "r": 1}, "c1r0": {"c": 1, "r": 0}, "c1r1": {"c": 1, "r": 1}}


def row(cond: str, qid: str, correct: bool, *, rep: int = 0, cost: float = 0.0, transcript: str = "") -> Row:
    return Row(condition=cond, dataset="d", qid=qid, repeat=rep, answer="A" if correct else "B", gold="A",
               correct=correct, invalid=False, error=None, error_kind=None, calls=1, logical_calls=1, tokens=10,
               latency_s=0.1, summary={}, transcript=transcript, cost_usd=cost)


def grid_rows() -> list[Row]:
    # 8 questions; right on q1..q2 (c0r0, 25%), q1..q3 (c0r1, 37.5%), q1..q5 (c1r0, 62.5%), q1..q4 (c1r1, 50%).
    right = {"c0r0": 2, "c0r1": 3, "c1r0": 5, "c1r1": 4}
    return [row(c, str(i), i <= k) for c, k in right.items() for i in range(1, 9)]


def by_name(table: Any) -> dict[str, list[Any]]:
    return {r[0]: r for r in table.rows}


def test_factorial_table_matches_hand_computation() -> None:
    (f,) = study.factorials(grid_rows(), FLAGS, n_boot=500)
    t = by_name(study.factorial_table(f))
    cols = study.factorial_table(f).columns
    est, n, p, ph = cols.index("estimate_pts"), cols.index("n"), cols.index("p_raw"), cols.index("p_holm")
    # main c = ((62.5 + 50) - (25 + 37.5)) / 2; main r = ((37.5 + 50) - (25 + 62.5)) / 2;
    # interaction = (50 - 62.5) - (37.5 - 25)
    assert t["c main effect"][est] == 25.0
    assert t["r main effect"][est] == 0.0
    assert t["c x r interaction"][est] == -25.0
    assert t["c1r0 - c0r0 (c at r0)"][est] == 37.5
    assert t["c1r1 - c1r0 (r at c1)"][est] == -12.5
    assert all(r[n] == 8 for r in t.values())
    # c1r0 vs c0r0: 3 questions only c1r0 got right, none the other way: exact McNemar p = 2 / 2^3.
    simple = t["c1r0 - c0r0 (c at r0)"]
    assert simple[p] == 0.25
    assert simple[cols.index("test")] == "exact McNemar"
    # Holm within the four simple effects never lowers a p-value.
    assert simple[ph] >= simple[p]
    # The odds ratios sit beside the three factorial effects only.
    assert t["c main effect"][cols.index("OR_GEE")] != ""
    assert t["c1r0 - c0r0 (c at r0)"][cols.index("OR_GEE")] == ""


def test_paired_verdict_reads_the_holm_adjusted_p() -> None:
    # Three pairs, each with 6 questions only b got right of 20: raw p = 2 / 2^6 = 0.03125 each (and the
    # CI excludes 0), so unadjusted each says "b better"; Holm over 3 gives min(1, 3 * 0.03125) = 0.09375.
    rows = []
    pairs = [("c0r0", "c0r1"), ("c0r0", "c1r0"), ("c0r0", "c1r1")]
    for i in range(20):
        rows.append(row("c0r0", str(i), False))
        for _, b in pairs:
            rows.append(row(b, str(i), i < 6))
    t = paired_table(rows, pairs, n_boot=2000)
    for r in t.rows:
        assert (r[8], r[9]) == (6, 0)
        assert r[10] == pytest.approx(0.0312, abs=1e-4)
        assert r[11] == pytest.approx(0.0938, abs=1e-4)
        assert r[12] == "no detectable difference"


def test_repeat_tables_flip_rate_and_pass_k() -> None:
    # 4 questions x 2 runs for c0: q1 right twice, q2 right then wrong, q3 wrong then right, q4 wrong twice.
    # flips = 2 (q2, q3); pass^2 = 1 of 4 = 25%; accuracy = 4 of 8 = 50%.
    pattern = {"1": (True, True), "2": (True, False), "3": (False, True), "4": (False, False)}
    rows = [row("c0", q, v[rep], rep=rep) for q, v in pattern.items() for rep in (0, 1)]
    rows += [row("c1", q, True, rep=rep) for q in pattern for rep in (0, 1)]
    summary, comparisons = study.repeat_tables(rows, ["c0", "c1"], [("c0", "c1")], n_boot=500)
    c0 = summary.rows[0]
    cols = summary.columns
    assert (c0[cols.index("n")], c0[cols.index("runs")], c0[cols.index("accuracy_%")]) == (4, 2, 50.0)
    assert (c0[cols.index("flips")], c0[cols.index("flip_rate_%")], c0[cols.index("pass^2_%")]) == (2, 50.0, 25.0)
    # c1 - c0 over both runs: per-question means 0, 0.5, 0.5, 1 -> 50 points.
    assert comparisons.rows[0][0] == "c1 - c0" and comparisons.rows[0][3] == 50.0


def test_table3_contrast_is_tested() -> None:
    rows = [row("c1r0k1", str(i), i < 6) for i in range(10)] + [row("c1r1k1", str(i), i < 3) for i in range(10)]
    t = table3_contrast(rows, ["c1r0k1", "c1r1k1"], n_boot=500)
    assert t is not None
    (r,) = t.rows
    # 3 questions only the base got right: diff -30 points, exact McNemar p = 0.25.
    assert (r[0], r[3], r[6], r[7], r[9]) == ("c1r1k1 - c1r0k1", -30.0, 0, 3, 0.25)
    assert table3_contrast(rows, ["c1r0k1"], n_boot=10) is None


def call(role: str, step: str, pt: int, ct: int, *, hit: bool = False, attempts: int = 1) -> dict[str, Any]:
    return {"kind": "call", "role": role, "step": step, "model": "m", "cache_hit": hit, "attempts": attempts,
            "usage": {"prompt_tokens": pt, "completion_tokens": ct}}


def test_ledger_and_usd_per_extra_correct_in_build_tables() -> None:
    events = {"a0": [call("specialist", "initial", 1000, 100), call("challenger", "critique", 500, 50, hit=True)],
              "a1": [call("specialist", "initial", 1000, 100, attempts=2), call("moderator", "final", 2000, 0)]}
    rows = [row("c0", "1", False, cost=0.001, transcript="a0"), row("c1", "1", True, cost=0.003, transcript="a1"),
            row("c0", "2", True, cost=0.001, transcript="a0"), row("c1", "2", True, cost=0.003, transcript="a1")]
    meta = {"conditions": [{"slug": "c0", "flags": {"c": 0}}, {"slug": "c1", "flags": {"c": 1}}],
            "scenario": {"run": {"prices": {"m": {"input": 1.0, "output": 2.0}}}}}
    tables = {t.title: t for t in build_tables(rows, run_record(meta), n_boot=200,
                                               events=lambda r: events[r.transcript])}
    ledger = tables["Cost ledger per role and step"]
    lines = {(r[0], r[1], r[2]): r for r in ledger.rows}
    # c0's specialist: 2 questions x 1 call x (1000 in, 100 out); $ = 2 x (1000 x 1 + 100 x 2) / 1e6.
    assert lines[("c0", "specialist", "initial")][3:7] == [2, 2000, 200, 0.0024]
    # The cache-answered Challenger call: no call sent, $0, counted apart with what it saved.
    assert lines[("c0", "challenger", "critique")][3:] == [0, 0, 0, 0.0, 2, 1100, 0.0012, 0]
    # c1: two attempts of the specialist's call per question are two requests.
    assert lines[("c1", "specialist", "initial")][3] == 4
    assert lines[("c1", "all", "all")][3] == 6
    usd = tables["USD per extra correct answer"].rows[0]
    # c1 spends 0.006 - 0.002 = $0.004 for 2 - 1 = 1 extra correct answer.
    assert usd[:8] == ["c0", "c1", 2, 0.002, 0.006, 1, 2, 1]
    assert usd[8] == pytest.approx(0.004)


def test_study_plots_forest_and_interaction(tmp_path: Any) -> None:
    from medpanel.experiments.analysis.study_plots import forest_data, write_study_plots

    rows = grid_rows()
    meta = {"conditions": [{"slug": s, "flags": f} for s, f in FLAGS.items()]}
    pairs = [("c0r0", "c1r0"), ("c1r0", "c1r1")]
    paths = write_study_plots(rows, run_record(meta), pairs, tmp_path, n_boot=200)
    assert sorted(p.name for p in paths) == ["forest.png", "forest.svg", "interaction_cxr.png", "interaction_cxr.svg"]
    # One dataset: the pooled row only, one per pair, with the hand-computed differences.
    items = forest_data(rows, pairs, n_boot=200)
    assert [(g, e.contrast.name, e.contrast.estimate) for g, e in items] == [
        ("pooled", "c1r0 - c0r0", 37.5), ("pooled", "c1r1 - c1r0", -12.5)]


def test_odds_ratio_of_a_flag_that_never_changes_an_answer_is_not_a_number() -> None:
    """r changes no answer (c0r1 = c0r0, c1r1 = c1r0 on every question): GEE's sandwich SE collapses
    to 0 and it printed OR 1.00 [1.00, 1.00] with p ~ 1e-18; the table must say why there is none."""
    right = {"c0r0": 2, "c0r1": 2, "c1r0": 5, "c1r1": 5}
    rows = [row(c, str(i), i <= k) for c, k in right.items() for i in range(1, 9)]
    (f,) = study.factorials(rows, FLAGS, n_boot=200)
    gee = {o.term: o for o in f.odds_ratios if o.model.startswith("GEE")}
    assert math.isnan(gee["r (main)"].odds_ratio) and "standard error 0" in gee["r (main)"].note
    assert not math.isnan(gee["c (main)"].odds_ratio)
