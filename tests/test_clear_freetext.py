"""CLEAR's free-text adapter: task loading, the response generator (no new retrieval), the rubric grader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from medpanel.agents.freetext.tasks import RubricItem, read_tasks
from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import Question
from medpanel.methods.clear.roles.grader import rubric_score

from .test_clear import Env, Raw, Script, Seq, decision, docs, installer, run_clear, verdict

TASKS = read_tasks("sample")


@pytest.fixture()
def env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Env]:
    return installer(monkeypatch)


FT1 = next(t for t in TASKS if t.qid == "ft-01")
Q1 = FT1.question()


def met_items(*met: int) -> Callable[[ScriptedRequest], dict[str, object]]:
    """The grader's reply to each per-item call (step `grade`, turn N): met when N is listed."""
    return lambda r: {"explanation": f"item {r.tag.turn}", "criteria_met": r.tag.turn in met}


def freetext_script(verify: object = None, extra: dict[str, object] | None = None) -> Script:
    replies: dict[str, object] = {"respond": {"response": "Go to maternity triage now: this could be pre-eclampsia."},
                                  "grade": met_items(1, 3, 5), **(extra or {})}
    return Script(p="Migraine; rest.", lc="Possible pre-eclampsia; urgent review.", d="Pre-eclampsia; urgent.",
                  verify=verify or verdict("keep_local", "Possible pre-eclampsia needing urgent same-day assessment."),
                  extra=replies)


def test_packaged_tasks_load_as_questions_without_options_or_gold() -> None:
    from medpanel.experiments.run.sources.freetext import load_freetext

    assert len(TASKS) == 6 and {t.dataset for t in TASKS} == {"consumer", "clinician"}
    assert any(item.points < 0 for t in TASKS for item in t.rubrics)
    questions = load_freetext("sample", None, None, 42)
    assert all(q.options == {} and q.gold == () for q in questions)
    assert [q.key for q in load_freetext(None, ["clinician"], 1, 42)] in (["clinician__ft-05"], ["clinician__ft-06"])
    multi = next(q for q in questions if q.qid == "ft-03")
    assert multi.text.startswith("Conversation so far:") and "[assistant]" in multi.text
    # the rubric never leaves the task file
    assert "pre-eclampsia" not in Q1.model_dump_json().lower()


def test_bad_task_file_is_one_user_error(tmp_path: Path) -> None:
    from medpanel.experiments.errors import UserError
    from medpanel.experiments.run.sources.freetext import load_freetext

    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "x", "prompt": "hi"}) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"t.jsonl:1: rubrics"):
        load_freetext(f, None, None, 0)
    with pytest.raises(UserError, match="unknown subset"):
        load_freetext("sample", ["nope"], None, 0)


def test_rubric_score_follows_healthbench() -> None:
    items = [RubricItem(criterion="a", points=10), RubricItem(criterion="b", points=5),
             RubricItem(criterion="bad", points=-10)]
    assert rubric_score(items, {1, 2}) == 1.0
    assert rubric_score(items, {1}) == pytest.approx(10 / 15)
    # an example's score is not clipped (simple-evals): the mean over examples is
    assert rubric_score(items, {2, 3}) == pytest.approx(-5 / 15)
    assert rubric_score([RubricItem(criterion="bad", points=-1)], {1}) == 0.0  # no positive points


def test_clear_free_text_writes_from_the_decision_without_retrieving_again(env: Callable[..., Env]) -> None:
    e = env([docs(high=1, low=1)])
    s = freetext_script()
    result = run_clear(Q1, s, settings={"rubric_file": "sample"})
    assert not result.error and not result.invalid and result.answer == ()
    grades = ["grade"] * len(FT1.rubrics)
    assert [r.tag.step for r in s.seen] == ["parametric", "local", "dynamic", "verify", "respond", *grades]
    assert [r.tag.turn for r in s.requests("grade")] == list(range(1, len(FT1.rubrics) + 1))
    assert (len(e.local.queries), len(e.dynamic.queries)) == (1, 1)
    assert not [x for x in result.events if x.kind == "note" and x.role == "retrieval"
                and result.events.index(x) > next(i for i, y in enumerate(result.events) if y.step == "verify")]
    last = decision(result)
    assert last.role == "verifier" and last.data["adapter_searches"] == 0
    assert last.data["route"] == "keep_local" and last.data["response"].startswith("Go to maternity triage")
    respond = s.requests("respond")[0].last
    assert "<decision>" in respond and "urgent same-day assessment" in respond and "<passages>" in respond
    # the score: items 1 (10) + 3 (3) + 5 (-10) over positive points 22
    assert result.summary["rubric_score"] == round(3 / 22, 6) and result.summary["grade_valid"] is True
    assert last.data["grade"]["met"] == [1, 3, 5]
    # no role but the grader ever sees a rubric criterion
    criterion = FT1.rubrics[0].criterion
    for r in s.seen:
        assert (criterion in r.last) is (r.tag.role == "grader" and r.tag.turn == 1)
    assert result.summary["guard"] == "not_triggered" and result.summary["agreement"] == "free_text"


def test_free_text_needs_more_search_follows_up_then_responds(env: Callable[..., Env]) -> None:
    e = env([docs(low=1), docs(high=1)])
    s = freetext_script(verify=Seq(verdict("needs_more_search", "Unclear."), verdict("accept_dynamic", "Urgent.")))
    result = run_clear(Q1, s, settings={"rubric_file": "sample"})
    assert [r.tag.step for r in s.seen][:8] == ["parametric", "local", "dynamic", "verify", "followup_query",
                                                "verify", "respond", "grade"]
    assert len(e.dynamic.queries) == 2 and result.summary["follow_ups"] == 1
    assert decision(result).data["adapter_searches"] == 0


def test_baselines_use_the_same_response_generator(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    s = freetext_script()
    result = run_clear(Q1, s, variant="direct", settings={"rubric_file": "sample"})
    assert [r.tag.step for r in s.seen][:3] == ["parametric", "respond", "grade"]
    assert result.summary["rubric_score"] is not None and decision(result).role == "pipeline"


def test_grader_can_be_a_second_model(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    result = run_clear(Q1, freetext_script(), settings={"rubric_file": "sample",
                                                        "grader_model": {"backend": "scripted", "name": "judge-x"}})
    grade = next(x for x in result.events if x.step.startswith("grade"))
    assert grade.model == "judge-x" and grade.role == "grader"


def test_without_a_rubric_there_is_no_grade(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    s = freetext_script()
    result = run_clear(Q1, s)
    assert not s.requests("grade") and result.summary["rubric_score"] is None


def test_invalid_response_is_invalid_and_not_graded(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    s = freetext_script(extra={"respond": Raw("...")})
    result = run_clear(Q1, s, settings={"rubric_file": "sample"})
    assert result.invalid and not s.requests("grade")


def test_invalid_grade_is_recorded(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    result = run_clear(Q1, freetext_script(extra={"grade": Raw("good answer")}), settings={"rubric_file": "sample"})
    assert result.summary["grade_valid"] is False and result.summary["rubric_score"] is None


def test_unknown_rubric_file_fails_validation(tmp_path: Path) -> None:
    from medpanel.experiments.errors import UserError
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    f = tmp_path / "s.yaml"
    f.write_text("name: x\npipeline: clear\nsettings: {rubric_file: missing.jsonl}\nmodel: {backend: scripted}\n")
    with pytest.raises(UserError, match=r"settings\.rubric_file"):
        make_plan(load_scenario(f), base_dir=tmp_path)


def test_question_outside_the_rubric_file_is_not_graded(env: Callable[..., Env]) -> None:
    env([docs(high=1)])
    other = Question(dataset="other", qid="z", text="Is it safe to fly at 20 weeks pregnant?", options={}, gold=())
    s = freetext_script()
    result = run_clear(other, s, settings={"rubric_file": "sample"})
    assert not s.requests("grade") and result.summary["rubric_score"] is None
