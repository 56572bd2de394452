"""Report arithmetic on hand-made result rows."""

from __future__ import annotations

from typing import Any

import pytest

from medpanel.experiments.analysis.report import (
    accuracy_table,
    build_tables,
    cost_table,
    default_comparisons,
    paired_table,
    repeats_table,
)
from medpanel.experiments.run.store.rows import Row
from medpanel.methods.panel.tables import recruitment_table
from tests.run_records import run_record


def row(cond: str, qid: str, correct: bool, *, ds: str = "d", recruited: int = 0, panel: int = 2, rep: int = 0,
        invalid: bool = False, error: str | None = None, calls: int = 10, logical: int = 10,
        extra: dict[str, Any] | None = None) -> Row:
    summary = {"recruited": recruited, "final_panel_size": panel, **(extra or {})}
    return Row(condition=cond, dataset=ds, qid=qid, repeat=rep, answer="" if invalid else "A", gold="A",
               correct=correct, invalid=invalid, error=error, error_kind="timeout" if error else None, calls=calls,
               logical_calls=logical, tokens=100, latency_s=1.0, summary=summary, transcript="t.json")


def test_recruitment_rate_arithmetic() -> None:
    rows = [row("c1r1", "1", True, recruited=2, panel=4), row("c1r1", "2", False, recruited=0, panel=2),
            row("c1r1", "3", True, recruited=1, panel=3), row("c1r1", "4", True, recruited=0, panel=2)]
    table = recruitment_table(rows, ["c1r1"])
    assert table is not None
    # 2 of 4 questions recruited; 3 recruits over 4 questions; panels 4+2+3+2 = 11 / 4
    assert table.rows == [["c1r1", 4, 2, 50.0, 0.75, 2.75]]


def test_accuracy_counts_invalid_and_errors_as_wrong() -> None:
    rows = [row("c0", "1", True, ds="a"), row("c0", "2", False, ds="a", invalid=True),
            row("c0", "3", False, ds="b", error="timeout: x"), row("c0", "4", True, ds="b")]
    table = accuracy_table(rows, ["c0"])
    assert table.rows[0] == ["c0", "a", 2, 1, 50.0, 1, 0]
    assert table.rows[-1] == ["c0", "overall", 4, 2, 50.0, 1, 1]


def test_cost_table_reports_calls_saved_by_cache() -> None:
    rows = [row("c1", "1", True, calls=3, logical=5), row("c1", "2", True, calls=5, logical=5)]
    assert cost_table(rows, ["c1"]).rows[0][:5] == ["c1", 2, 4.0, 5.0, 2]


def test_paired_table_matches_hand_computation() -> None:
    a_right = {"1", "2", "3", "4"}
    b_right = {"1", "2", "3", "4", "5", "6", "7"}
    rows = [row("c1r0", str(i), str(i) in a_right) for i in range(1, 11)]
    rows += [row("c1r1", str(i), str(i) in b_right) for i in range(1, 11)]
    t = paired_table(rows, [("c1r0", "c1r1")], n_boot=2000)
    _, _, _, n, acc_a, acc_b, diff, _, b_only, a_only, p, p_holm, verdict = t.rows[0]
    assert (n, acc_a, acc_b, diff, b_only, a_only) == (10, 40.0, 70.0, 30.0, 3, 0)
    assert p == pytest.approx(0.25)
    assert p_holm == pytest.approx(0.25)  # a family of one
    assert verdict == "no detectable difference"


def test_default_comparisons_differ_in_one_flag() -> None:
    flags = {"c0r0": {"c": 0, "r": 0}, "c0r1": {"c": 0, "r": 1}, "c1r0": {"c": 1, "r": 0}, "c1r1": {"c": 1, "r": 1}}
    pairs = default_comparisons(list(flags), flags)
    assert sorted(pairs) == [("c0r0", "c0r1"), ("c0r0", "c1r0"), ("c0r1", "c1r1"), ("c1r0", "c1r1")]


def test_repeats_mean_and_sample_sd() -> None:
    rows = []
    for rep, k in enumerate([2, 3, 4]):  # 20%, 30%, 40% of 10 questions
        rows += [row("c0", str(i), i < k, rep=rep) for i in range(10)]
    t = repeats_table(rows, ["c0"])
    assert t is not None and t.rows[0][:4] == ["c0", 3, 30.0, 10.0]


def test_self_assessment_table_is_built_when_rows_carry_it() -> None:
    rows = [row("c0r1", "1", True, recruited=1, panel=3, extra={"self_assessment": True}),
            row("c0r1", "2", False, recruited=0, panel=2, extra={"self_assessment": True})]
    meta = {"conditions": [{"slug": "c0r1", "flags": {"c": 0, "r": 1}}], "scenario": {}}
    titles = {t.title: t for t in build_tables(rows, run_record(meta), n_boot=100)}
    t = titles["Self-assessment diagnostic"]
    assert t.rows == [["c0r1", 2, 50.0, 50.0, "1/2", 50.0, 2.5]]


def _k(queries: int, retrievals: int, passages: int, delivered: int, received: list[str]) -> dict[str, Any]:
    return {"queries_written": queries, "retrievals": retrievals, "passages_retrieved": passages,
            "briefs_delivered": delivered, "brief_received_by": received, "recruit_names": ["r1"]}


def test_knowledge_table_counts_gate_retrieval_delivery_and_recipients_apart() -> None:
    from medpanel.methods.panel.channels.tables import knowledge_table

    rows = [row("c1r1k1", "1", True, ds="a", extra=_k(2, 1, 3, 1, ["x", "r1"])),
            row("c1r1k1", "2", False, ds="a", extra=_k(1, 1, 4, 0, [])),  # retrieved, brief never delivered
            row("c1r1k1", "3", False, ds="b", extra=_k(1, 0, 0, 0, [])),  # the gate fired, nothing found
            row("c1r1k1", "4", False, ds="b", extra=_k(0, 0, 0, 0, [])),  # the gate declined
            row("c1r1k1", "5", False, ds="b", error="timeout: x", extra=_k(0, 0, 0, 0, []))]
    t = knowledge_table(rows, ["c1r1k1"])
    assert t is not None
    got = {r[1]: r[2:] for r in t.rows}
    # n, errors, fired q/%, retrieved q/%, delivered q/%, queries/q, passages/q, recipients/q, recruits/q
    assert got["a"] == [2, 0, 2, 100.0, 2, 100.0, 1, 50.0, 1.5, 3.5, 1.0, 0.5]
    assert got["b"] == [2, 1, 1, 50.0, 0, 0.0, 0, 0.0, 0.5, 0.0, 0.0, 0.0]
    assert got["overall"] == [4, 1, 3, 75.0, 2, 50.0, 1, 25.0, 1.0, 1.75, 0.5, 0.25]


def test_recruitment_rate_per_dataset_is_the_papers_table_11() -> None:
    from medpanel.methods.panel.tables import recruitment_by_dataset_table

    rows = [row("c1r1", "1", True, ds="medqa", recruited=1, panel=3), row("c1r1", "2", False, ds="medqa"),
            row("c1r1", "3", True, ds="medqa", recruited=2, panel=4), row("c1r1", "4", True, ds="pubmedqa"),
            row("c1r1", "5", False, ds="pubmedqa", error="timeout: x"),
            row("c1r0", "1", True, ds="medqa"), row("c1r0", "4", False, ds="pubmedqa")]
    t = recruitment_by_dataset_table(rows, ["c1r0", "c1r1"])
    assert t is not None
    got = {(r[0], r[1]): r[2:] for r in t.rows}
    # medqa: 3 questions, 2 right; 2 of 3 recruited; 3 recruits / 3; panels (3 + 2 + 4) / 3
    assert got[("c1r1", "medqa")] == [3, 0, 66.7, 2, 66.7, 1.0, 3.0]
    # pubmedqa: 2 rows, 1 errored (wrong, and not in the recruitment denominator): 0 of 1 recruited
    assert got[("c1r1", "pubmedqa")] == [2, 1, 50.0, 0, 0.0, 0.0, 2.0]
    assert got[("c1r1", "overall")] == [5, 1, 60.0, 2, 50.0, 0.75, 2.75]
    assert got[("c1r0", "medqa")] == [1, 0, 100.0, 0, 0.0, 0.0, 2.0]
    titles = [x.title for x in build_tables(rows, run_record({"conditions": [], "scenario": {}}), n_boot=10)]
    assert "Recruitment per dataset" in titles


def test_a_pipelines_tables_come_from_its_own_declaration_not_from_summary_keys() -> None:
    """A calibrated row's summary has a `route` (solo, small group, multi-group): CLEAR's route tables,
    which used to be picked by that key, are not a calibrated run's."""
    rows = [Row(condition="c1", dataset="d", qid=str(i), repeat=0, answer="A", gold="A", correct=True, invalid=False,
                error=None, error_kind=None, calls=1, logical_calls=1, tokens=1, latency_s=0.1, transcript="x",
                summary={"level": "basic", "route": "solo", "challenger_depth": "light", "timing": "none"})
            for i in range(2)]
    calibrated = [t.title for t in build_tables(rows, run_record({"conditions": [{"slug": "c1"}],
                                                                  "scenario": {"pipeline": "calibrated"}}), n_boot=10)]
    assert calibrated == ["Accuracy per condition x dataset", "Cost per question", "Accuracy and compute"]
    clear = [t.title for t in build_tables(rows, run_record({"conditions": [{"slug": "c1"}],
                                                             "scenario": {"pipeline": "clear"}}), n_boot=10)]
    assert "CLEAR route distribution" in clear  # the same rows read as CLEAR's do get CLEAR's tables
