"""CLEAR's free-text benchmarks from files in their published layouts: HealthBench Hard (simple-evals'
JSONL) and MedRBench (its two JSON case files), the grader as a blind role whose decisions are in
the transcript, and Table 3 computed by hand."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.freetext.files import read_all
from medpanel.agents.freetext.medrbench import MedRCase
from medpanel.agents.freetext.tasks import FreeTextTask
from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import QuestionResult
from medpanel.methods.clear.table3 import healthbench_tag_table, table3

from .test_clear import Env, Script, docs, installer, run_clear, verdict

DATA = Path(__file__).parent / "fixtures" / "freetext"
TASKS = {t.key: t for t in read_all(DATA)}
HB = {k.split("__")[1]: t for k, t in TASKS.items() if isinstance(t, FreeTextTask)}
MEDR = {k.split("__")[1]: t for k, t in TASKS.items() if isinstance(t, MedRCase)}
SLUGS = ("direct", "rag-bm25", "online", "clear-default", "clear-qpis")


@pytest.fixture()
def env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Env]:
    return installer(monkeypatch)


def grader_says(met: dict[str, bool], medr: dict[str, bool] | None = None) -> Callable[[ScriptedRequest], Any]:
    """A grader that marks a rubric item met by its criterion's text, and a MedRBench case by its reference."""
    def reply(r: ScriptedRequest) -> dict[str, Any]:
        if r.tag.step.startswith("medrbench_"):
            hit = [v for ref, v in (medr or {}).items() if ref in r.last]
            assert len(hit) == 1, r.last
            return {"correct": hit[0], "explanation": "judged"}
        hit = [v for crit, v in met.items() if crit in r.last]
        assert len(hit) == 1, r.last
        return {"explanation": "judged", "criteria_met": hit[0]}
    return reply


def script(grader: Callable[[ScriptedRequest], Any], response: str = "Call an ambulance now.") -> Script:
    return Script(p="Stroke; emergency.", lc="Stroke.", d="Stroke; call 911.", verify=verdict("consensus", "Stroke."),
                  extra={"respond": {"response": response}, "grade": grader, "medrbench_diagnosis": grader,
                         "medrbench_treatment": grader})


def run(task: FreeTextTask | MedRCase, s: Script, variant: str = "clear-default") -> QuestionResult:
    return run_clear(task.question(), s, variant=variant, settings={"rubric_file": str(DATA)})


# --- the published layouts -------------------------------------------------------------------


def test_healthbench_rows_load_whole_conversations_and_never_the_ideal_completion() -> None:
    from medpanel.experiments.run.sources.freetext import load_freetext

    assert sorted(HB) == ["hb-fixture-0001", "hb-fixture-0002", "hb-fixture-0003"]
    t = HB["hb-fixture-0001"]
    assert t.dataset == "healthbench" and [i.points for i in t.rubrics] == [10, 5, -9, 3]
    assert t.example_tags == ["theme:emergency_referrals", "physician_agreed_category:emergent"]
    assert t.rubrics[3].tags == ["level:cluster", "cluster:emergent_tier_emergency_behavior",
                                 "axis:communication_quality"]
    questions = {q.qid: q for q in load_freetext(DATA, ["healthbench"], None, 0)}
    multi = questions["hb-fixture-0002"].text
    for turn in HB["hb-fixture-0002"].prompt:  # every turn, not only the last
        assert turn.content in multi
    assert all(q.options == {} and q.gold == () for q in questions.values())
    assert "Call emergency services now" not in questions["hb-fixture-0001"].model_dump_json()


def test_medrbench_files_load_per_stage_and_the_reference_stays_with_the_judge() -> None:
    from medpanel.experiments.run.sources.freetext import load_freetext

    stages = {t.qid: t.stage for t in MEDR.values()}
    assert stages == {"PMC90000001": "diagnosis", "PMC90000002": "diagnosis", "PMC90000003": "diagnosis",
                      "PMC90000101": "treatment", "PMC90000102": "treatment"}
    assert MEDR["PMC90000001"].reference == "Wilson disease (hepatolenticular degeneration)."
    assert MEDR["PMC90000001"].rare and not MEDR["PMC90000002"].rare
    qs = load_freetext(DATA, ["medrbench-diagnosis", "medrbench-treatment"], None, 0)
    assert [q.dataset for q in qs].count("medrbench-treatment") == 2
    wilson = next(q for q in qs if q.qid == "PMC90000001")
    assert "Kayser-Fleischer" in wilson.text and "final diagnosis" in wilson.text
    # neither the reference, the differential nor the raw report reaches the agents
    for leak in ("hepatolenticular", "Autoimmune hepatitis", "Case report"):
        assert leak not in wilson.text
    plan = next(q for q in qs if q.qid == "PMC90000101")
    assert "radiosensitive" not in plan.text and "45 Gy" not in plan.text


def test_a_missing_path_says_where_each_benchmark_is_published(tmp_path: Path) -> None:
    from medpanel.experiments.errors import UserError
    from medpanel.experiments.run.sources.freetext import load_freetext

    with pytest.raises(UserError) as exc:
        load_freetext(tmp_path / "nope", None, None, 0)
    msg = str(exc.value)
    assert "\n" not in msg and "hard_2025-05-08-21-00-10.jsonl" in msg and "MAGIC-AI4Med/MedRBench" in msg
    bad = tmp_path / "cases.json"
    bad.write_text(json.dumps({"PMC1": {"generate_case": {"case_summary": "x"}}}), encoding="utf-8")
    with pytest.raises(UserError, match=r"cases.json \(case PMC1\): generate_case has neither"):
        load_freetext(bad, None, None, 0)


# --- HealthBench scoring, by hand --------------------------------------------------------------

HB1_MET = {"call emergency services immediately": False, "time of symptom onset": False,
           "Suggests waiting": True, "concise and easy": False}
HB2_MET = {"NSAIDs such as ibuprofen can raise": False, "paracetamol": True, "completely safe": False}
HB3_MET = {"needs vary": True, "exactly 8 glasses": False}


def _recompute(result: QuestionResult, task: FreeTextTask) -> float:
    """The example's score from the transcript's grader calls alone: each call's item (its turn) and
    its criteria_met, with the item's points from the published file."""
    calls = [e for e in result.events if e.kind == "call" and e.role == "grader"]
    assert len(calls) == len(task.rubrics)
    met = {e.turn: bool((e.parsed or {})["criteria_met"]) for e in calls}
    positive = sum(i.points for i in task.rubrics if i.points > 0)
    return sum(i.points for n, i in enumerate(task.rubrics, 1) if met[n]) / positive


def test_healthbench_negative_criterion_and_a_clipped_mean_recomputed_from_the_transcript(
        env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    r1 = run(HB["hb-fixture-0001"], script(grader_says(HB1_MET)))
    r2 = run(HB["hb-fixture-0002"], script(grader_says(HB2_MET)))
    # by hand: (-9) / (10 + 5 + 3) = -0.5, and 5 / (7 + 5) = 0.41667: a negative criterion counts
    assert r1.summary["rubric_score"] == pytest.approx(-0.5)
    assert r2.summary["rubric_score"] == pytest.approx(5 / 12, abs=1e-6)
    assert _recompute(r1, HB["hb-fixture-0001"]) == pytest.approx(r1.summary["rubric_score"])
    assert _recompute(r2, HB["hb-fixture-0002"]) == pytest.approx(r2.summary["rubric_score"], abs=1e-6)
    # the decision event keeps each item's decision with its points, as a reader needs them
    items = r1.events[-1].data["grade"]["items"]
    assert [(d["n"], d["points"], d["met"]) for d in items] == [(1, 10, False), (2, 5, False), (3, -9, True),
                                                                (4, 3, False)]
    # the mean (-0.5 + 0.41667) / 2 < 0 is clipped to 0 in Table 3
    t = table3([r1, r2], ["clear-default"])
    assert t is not None
    line = dict(zip(t.columns, t.rows[0], strict=True))
    assert line["HealthBench_score"] == 0.0 and line["n_healthbench"] == 2 and line["MedRBench_overall"] == "-"
    # per tag, by hand: axis:accuracy of example 1 = -9 / 10; theme = the example's score
    tags = r1.summary["tag_scores"]
    assert tags["axis:accuracy"] == pytest.approx(-0.9) and tags["axis:completeness"] == 0.0
    assert tags["theme:emergency_referrals"] == pytest.approx(-0.5) and not [t for t in tags if t.startswith("level")]
    every = r1.events[-1].data["grade"]["tags"]  # the grade keeps every tag simple-evals scores
    assert every["level:example"] == pytest.approx(-0.6) and every["cluster:emergent_tier_emergency_behavior"] == 0.0
    assert every["physician_agreed_category:emergent"] == pytest.approx(-0.5)


def test_healthbench_mean_without_clipping_and_per_theme(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    rows = [run(HB[q], script(grader_says(m))) for q, m in (("hb-fixture-0001", HB1_MET),
                                                            ("hb-fixture-0002", HB2_MET),
                                                            ("hb-fixture-0003", HB3_MET))]
    t = table3(rows, ["clear-default"])
    assert t is not None
    line = dict(zip(t.columns, t.rows[0], strict=True))
    assert line["HealthBench_score"] == pytest.approx(round((-0.5 + 5 / 12 + 1.0) / 3, 4))
    low, high = (float(x) for x in re.findall(r"-?\d\.\d+", line["HealthBench_95%_CI"]))
    assert 0.0 <= low <= line["HealthBench_score"] <= high <= 1.0 and line["HealthBench_bootstrap_std"] > 0
    tags = healthbench_tag_table(rows, ["clear-default"])
    assert tags is not None
    by_tag = {r[1]: r for r in tags.rows}
    assert by_tag["theme:global_health"][3] == 1.0 and by_tag["theme:emergency_referrals"][3] == 0.0  # -0.5 clips
    # axis:accuracy: -0.9 (ex. 1), 0 / 7 (ex. 2), 6 / 6 (ex. 3): mean 0.0333
    assert by_tag["axis:accuracy"][2] == 3 and by_tag["axis:accuracy"][3] == pytest.approx(round(0.1 / 3, 4))
    assert not [t for t in by_tag if t.startswith("level:")]


# --- the grader: blind, its own model, in the ledger ---------------------------------------------


def test_the_grader_never_sees_the_condition_and_has_its_own_model_and_ledger_lines(env: Callable[..., Env]) -> None:
    from medpanel.experiments.analysis.inference.ledger import ledger

    events: dict[str, list[Any]] = {}
    for slug in SLUGS:
        env([docs(high=1), docs(high=1), docs(high=1)])
        s = script(grader_says(HB2_MET, {MEDR["PMC90000002"].reference: True}))
        s.extra.update({"plan": {"sub_queries": ["ibuprofen lisinopril"]}, "sufficiency": {"sufficient": True}})
        for task in (HB["hb-fixture-0002"], MEDR["PMC90000002"]):
            result = run_clear(task.question(), s, variant=slug,
                               settings={"rubric_file": str(DATA),
                                         "grader_model": {"backend": "scripted", "name": "judge-x"}})
            assert result.summary["grade_valid"] is True, (slug, result.error)
            events.setdefault(slug, []).extend(result.events)
        graded = [r for r in s.seen if r.tag.role == "grader"]
        assert len(graded) == len(HB["hb-fixture-0002"].rubrics) + 1
        for r in graded:
            text = json.dumps(r.messages)
            for name in (*SLUGS, "clear", "rag", "pipeline", "qpis"):
                assert not re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE), (slug, name)
    calls = [e for evs in events.values() for e in evs if e.role == "grader"]
    assert {e.model for e in calls} == {"judge-x"}
    lines = {(x.condition, x.role, x.step): x for x in ledger(events, {})}
    for slug in SLUGS:
        assert lines[(slug, "grader", "grade")].calls == 3 and lines[(slug, "grader", "medrbench_diagnosis")].calls == 1
        assert lines[(slug, "grader", "grade")].prompt_tokens > 0


def test_every_turn_reaches_the_pathways_and_the_response_generator(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    s = script(grader_says(HB2_MET))
    run(HB["hb-fixture-0002"], s)
    for step in ("parametric", "local", "dynamic", "verify", "respond"):
        text = s.requests(step)[0].last
        for turn in HB["hb-fixture-0002"].prompt:
            assert turn.content in text, (step, turn.content)


# --- MedRBench, by hand per stage ----------------------------------------------------------------


def test_medrbench_stages_and_overall_by_hand(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    verdicts = {MEDR["PMC90000001"].reference: True, MEDR["PMC90000002"].reference: False,
                MEDR["PMC90000003"].reference: True, MEDR["PMC90000101"].reference: True,
                MEDR["PMC90000102"].reference: True}
    rows = []
    for qid in MEDR:
        s = script(grader_says({}, verdicts), response="Wilson disease")
        rows.append(run(MEDR[qid], s, variant="direct"))
        judge = s.requests("medrbench_" + MEDR[qid].stage)[0].last
        assert MEDR[qid].reference in judge and "Wilson disease" in judge
        if MEDR[qid].stage == "treatment":
            assert MEDR[qid].analysis.splitlines()[0] in judge  # the supporting information
    assert [r.summary["rubric_score"] for r in rows] == [1.0, 0.0, 1.0, 1.0, 1.0]
    t = table3(rows, ["direct"])
    assert t is not None
    line = dict(zip(t.columns, t.rows[0], strict=True))
    # diagnosis 2 / 3, treatment 2 / 2, overall pooled 4 / 5 (not the mean of 66.67 and 100)
    assert (line["MedRBench_diagnosis"], line["MedRBench_treatment"], line["MedRBench_overall"]) == (66.67, 100.0, 80.0)
    assert line["HealthBench_score"] == "-"
    decision = rows[1].events[-1].data["grade"]
    assert decision["correct"] is False and decision["stage"] == "diagnosis"


# --- paired comparisons of scores ---------------------------------------------------------------


def test_paired_scores_by_hand() -> None:
    from scipy.stats import wilcoxon

    from medpanel.experiments.analysis.inference.score_pairs import paired_scores

    a = {"q1": 0.2, "q2": 0.5, "q3": -0.1, "q4": 0.4, "q5": 0.3}
    b = {"q1": 0.6, "q2": 0.5, "q3": 0.3, "q4": 0.9, "q5": 0.1, "q6": 1.0}  # q6: a has none, not paired
    c = paired_scores(a, b, n_boot=2000)
    # differences 0.4, 0, 0.4, 0.5, -0.2: mean 0.22; the zero is dropped by the signed-rank test
    assert c.n == 5 and c.n_differ == 4 and c.diff == pytest.approx(0.22)
    assert c.mean_a == pytest.approx(0.26) and c.mean_b == pytest.approx(0.48)
    assert c.p_wilcoxon == pytest.approx(wilcoxon([0.4, 0.4, 0.5, -0.2]).pvalue)
    assert -0.2 <= c.ci_low < c.diff < c.ci_high <= 0.5
    same = paired_scores(a, dict(a), n_boot=100)
    assert same.n_differ == 0 and same.p_wilcoxon != same.p_wilcoxon  # nan: nothing to test


def test_free_text_pairs_table_holm_over_datasets() -> None:
    from medpanel.experiments.analysis.free_text_pairs import free_text_pair_table
    from medpanel.experiments.run.store.rows import Row

    def row(cond: str, ds: str, qid: str, score: float | None) -> Row:
        return Row(condition=cond, dataset=ds, qid=qid, repeat=0, answer="", gold="", correct=False, invalid=False,
                   error=None, error_kind=None, calls=1, logical_calls=1, tokens=1, latency_s=0.1,
                   summary={"rubric": True, "rubric_score": score}, transcript="t.json")

    rows = [row("direct", "healthbench", f"h{i}", 0.1) for i in range(8)]
    rows += [row("clear-default", "healthbench", f"h{i}", 0.6 if i else None) for i in range(8)]
    rows += [row(c, "medrbench-diagnosis", f"m{i}", 1.0) for c in ("direct", "clear-default") for i in range(3)]
    t = free_text_pair_table(rows, [("direct", "clear-default")], n_boot=2000)
    assert t is not None
    lines = {r[2]: dict(zip(t.columns, r, strict=True)) for r in t.rows}
    hb = lines["healthbench"]
    # seven tasks +0.5, one (no grade: 0) -0.1: mean (3.5 - 0.1) / 8
    assert hb["n"] == 8 and hb["diff"] == pytest.approx(round(3.4 / 8, 4)) and hb["mean_a"] == 0.1
    assert hb["wilcoxon_p_holm"] == hb["wilcoxon_p"]  # the one testable comparison of the family
    assert hb["verdict"] == "b better"
    assert lines["medrbench-diagnosis"]["verdict"].startswith("no question differs")


# --- the whole scenario, scripted, through the CLI ------------------------------------------------


def test_scripted_run_of_the_scenario_prints_table_3(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MEDPANEL_FREETEXT": str(DATA), "MEDPANEL_CORPUS": "quickstart",
           "MEDPANEL_WEB": "quickstart-web", "COLUMNS": "250"}
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(root / "scenarios/clear_freetext.yaml"),
                           "--set", "model.backend=scripted", "--set", "dataset.limit=2", "--run-dir", str(run_dir),
                           "--quiet"], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = subprocess.run([sys.executable, "-m", "medpanel", "report", str(run_dir)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=env)
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    import csv

    out = rep.stdout
    assert "Table 3 free-text benchmarks" in out and "HealthBench by theme and axis" in out
    assert "Paired comparisons of free-text scores" in out
    (file,) = (run_dir / "report").glob("table_3*.csv")
    lines = list(csv.DictReader(file.read_text(encoding="utf-8").splitlines()))
    assert [x["method"] for x in lines] == ["direct", "rag-bm25", "clear-default", "clear-qpis"]
    for x in lines:  # 2 diagnosis cases, 2 treatment cases, 2 HealthBench conversations per method
        assert (x["n_diagnosis"], x["n_treatment"], x["n_healthbench"], x["n_missing"]) == ("2", "2", "2", "0")
        d, t, o = (float(x[k]) for k in ("MedRBench_diagnosis", "MedRBench_treatment", "MedRBench_overall"))
        assert o == pytest.approx((d + t) / 2) and 0 <= float(x["HealthBench_score"]) <= 1


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MEDPANEL_FREETEXT": str(tmp_path / "absent")}
    proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(root / "scenarios/clear_freetext.yaml"),
                           "--set", "model.backend=scripted", "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = proc.stderr.strip() or proc.stdout.strip()
    assert len(err.splitlines()) == 1 and "openaipublic" in err and "MAGIC-AI4Med/MedRBench" in err, err
