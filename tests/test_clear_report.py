"""CLEAR's report tables on hand-made rows, and CLEAR through the real runner and store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medpanel.agents.tables import Table
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.transcript_log import record_path
from medpanel.methods.clear.tables import CLEAR_TABLES, followup_table, guard_audit_table, route_table

from .conftest import write


def clear_tables(rows: Sequence[Row]) -> list[Table]:
    """The CLEAR tables the rows support, built by the specs the report runs (conditions in row order)."""
    order = list(dict.fromkeys(r.condition for r in rows))
    return [t for spec in CLEAR_TABLES if (t := spec.build(rows, order)) is not None]

def row(cond: str, qid: str, correct: bool, *, ds: str = "medqa", gold: str = "A", **summary: Any) -> Row:
    base: dict[str, Any] = {"mode": "clear", "route": "consensus", "guard": "not_triggered",
                            "audit": "not_triggered", "follow_ups": 0, "revisions": 0, "fallback_used": False,
                            "candidates": {"parametric": ["A"], "local": ["A"], "dynamic": ["A"]},
                            "agreement": "all_agree"}
    return Row(condition=cond, dataset=ds, qid=qid, repeat=0, answer="A" if correct else "B", gold=gold,
               correct=correct, invalid=False, error=None, error_kind=None, calls=5, logical_calls=5, tokens=10,
               latency_s=1.0, summary={**base, **summary}, transcript="t.json")


ROWS = [
    row("clear-default", "1", True),
    row("clear-default", "2", False, route="keep_local", guard="rejected_no_high",
        candidates={"parametric": ["B"], "local": ["B"], "dynamic": ["A"]}, agreement="param_local_vs_dynamic"),
    row("clear-default", "3", True, route="accept_dynamic", guard="granted", follow_ups=1, revisions=1,
        candidates={"parametric": ["B"], "local": ["B"], "dynamic": ["A"]}, agreement="param_local_vs_dynamic"),
    row("clear-default", "4", True, ds="pubmedqa", route="consensus", audit="kept_below_threshold", follow_ups=1,
        fallback_used=True),
    row("clear-default", "5", False, ds="pubmedqa", route="needs_more_search", follow_ups=2),
    row("direct", "1", True, route=None),
]
ROWS[-1].summary.pop("route")


def test_route_distribution() -> None:
    t = route_table(ROWS, ["direct", "clear-default"])
    assert t is not None and len(t.rows) == 1  # baselines have no route
    assert t.rows[0] == ["clear-default", 5, 2, 0, 1, 1, 1, 1, 60.0]


def test_guard_and_audit_outcomes() -> None:
    t = guard_audit_table(ROWS, ["clear-default"])
    assert t is not None
    got = {(r[1], r[2]): r[3] for r in t.rows}
    assert got[("guard", "granted")] == 1 and got[("guard", "rejected_no_high")] == 1
    assert got[("guard", "not_triggered")] == 3 and got[("audit", "kept_below_threshold")] == 1


def test_follow_up_statistics_per_dataset() -> None:
    t = followup_table(ROWS, ["clear-default"])
    assert t is not None
    by_ds = {r[1]: r for r in t.rows}
    # medqa: 1 search, 1 accepted revision; pubmedqa: 3 searches, 0; overall 4 searches, 1 revision = 25%
    assert by_ds["medqa"][3:7] == [1, 1, 1, 100.0]
    assert by_ds["pubmedqa"][3:7] == [3, 2, 0, 0.0]
    assert by_ds["overall"][2:7] == [5, 4, 3, 1, 25.0]


def test_pathway_accuracy_and_free_text_tables() -> None:
    free = [row("clear-default", "f1", False, ds="consumer", gold="", rubric_score=0.5, candidates={}),
            row("clear-default", "f2", False, ds="consumer", gold="", rubric_score=None, candidates={})]
    tables = {t.title: t for t in clear_tables(ROWS + free)}
    pathway = tables["CLEAR pathway accuracy and agreement"]
    assert pathway.rows[0][:6] == ["clear-default", 5, 60.0, 60.0, 100.0, 60.0]
    ft = {r[1]: r for r in tables["Free-text rubric scores"].rows}
    # the ungraded task scores 0 and is counted missing: (0.5 + 0) / 2 (the mean used to drop it: 0.5)
    assert ft["consumer"][2:6] == [2, 1, 1, 0.25]
    assert clear_tables([r for r in ROWS if r.condition == "direct"]) == []


SCENARIO = """name: clear-scripted
pipeline: clear
variants: [direct, rag-bm25, online, clear-default, clear-no-followup]
settings: {{corpus: quickstart, k: 4, dynamic_k: 3}}
dataset: {{source: sample, limit: 2}}
model: {{backend: scripted}}
run: {{workers: {workers}}}
"""


def test_clear_through_the_runner_store_and_report(tmp_path: Path) -> None:
    from medpanel.experiments.analysis.report import build_tables
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario
    from medpanel.experiments.run.store.rundir import load_record
    from medpanel.experiments.run.store.store import Store

    path = write(tmp_path / "s.yaml", SCENARIO.format(workers=2))
    plan = make_plan(load_scenario(path), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    status = runner.run(install_signals=False)
    assert status["state"] == "complete"
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    assert len(rows) == len(plan.pairs) and not any(r.error for r in rows), [r.error for r in rows if r.error]
    clear_rows = [r for r in rows if r.condition.startswith("clear")]
    assert all(r.summary["route"] in ("consensus", "keep_parametric", "keep_local", "accept_dynamic",
                                      "needs_more_search") for r in clear_rows)
    titles = [t.title for t in clear_tables(rows)]
    assert titles[:3] == ["CLEAR route distribution", "CLEAR guard and audit outcomes", "CLEAR follow-up search"]
    assert build_tables(rows, load_record(runner.run_dir), n_boot=100)
    store.close()


def test_free_text_tasks_through_the_runner(tmp_path: Path) -> None:
    import json

    from medpanel.agents.model.spec import ModelSpec
    from medpanel.agents.types import Condition
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import Plan
    from medpanel.experiments.run.scenario.scenario import Scenario
    from medpanel.experiments.run.sources.freetext import load_freetext
    from medpanel.experiments.run.store.store import Store

    settings = {"corpus": "quickstart", "k": 2, "dynamic_k": 2, "rubric_file": "sample"}
    scenario = Scenario(name="ft", pipeline="clear", settings=settings, model=ModelSpec(backend="scripted"))
    conditions = [Condition(slug=s, pipeline="clear", flags={"variant": s}, settings=settings)
                  for s in ("direct", "clear-default")]
    questions = load_freetext("sample", ["clinician"], None, 0)
    plan = Plan(scenario=scenario, conditions=conditions, questions=questions, repeats=1, shard_size=2)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    assert len(rows) == 4 and not any(r.error for r in rows)
    assert all("rubric_score" in r.summary for r in rows)
    doc = json.loads(record_path(runner.run_dir, rows[0].transcript).read_text())
    assert doc["events"][-1]["kind"] == "decision" and "response" in doc["events"][-1]["data"]
    assert any(t.title == "Free-text rubric scores" for t in clear_tables(rows))
    store.close()


def test_free_text_mean_counts_missing_responses_grades_and_errors_as_zero() -> None:
    from medpanel.methods.clear.tables import freetext_table

    def ft(qid: str, score: float | None, *, invalid: bool = False, error: bool = False, ds: str = "hb") -> Row:
        import dataclasses

        r = row("clear-default", qid, False, ds=ds, gold="", rubric=True, rubric_score=score, candidates={})
        if error:
            return dataclasses.replace(r, error="timeout: x", error_kind="timeout", summary={})
        return dataclasses.replace(r, invalid=invalid)

    rows = [ft("1", 0.8), ft("2", 0.4), ft("3", None, invalid=True),  # no response
            ft("4", None),                                             # the grader's reply was invalid
            ft("5", None, error=True),                                 # the question errored
            ft("6", 1.0, ds="other")]
    t = freetext_table(rows, ["clear-default"])
    assert t is not None
    got = {r[1]: r[2:] for r in t.rows}
    # hb: 5 tasks, 2 graded, 3 missing; (0.8 + 0.4 + 0 + 0 + 0) / 5 = 0.24; 1 no response, 1 error
    assert got["hb"] == [5, 2, 3, 0.24, 1, 1]
    # overall: (0.8 + 0.4 + 1.0) / 6 = 0.3667
    assert got["overall"] == [6, 3, 3, 0.3667, 1, 1]
