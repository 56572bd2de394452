"""The published multi-agent methods (medagents, mdagents, kamac) on scripted models: stage order,
calls per question, the vote / consensus / routing / recruitment rules, and who saw what (traced
with unique tokens from one reply into later requests)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.model.structured import fields_of
from medpanel.agents.pipelines.multiagent_common import stage_of
from medpanel.agents.types import Condition, QuestionResult
from medpanel.experiments.analysis.report import build_tables
from medpanel.experiments.run.plan import make_plan
from medpanel.experiments.run.rundir import load_meta
from medpanel.experiments.run.runner import Runner
from medpanel.experiments.run.scenario import load_scenario
from medpanel.experiments.run.store import Store

from .conftest import write
from .scripted_helpers import Q4, run

REPO = Path(__file__).resolve().parents[1]


def method(name: str, **settings: Any) -> Condition:
    return Condition(slug=name, pipeline=name, settings=settings)


def steps(result: QuestionResult) -> list[str]:
    return [e.step for e in result.events if e.kind == "call"]


def stages(result: QuestionResult) -> list[str]:
    out: list[str] = []
    for s in steps(result):
        if not out or out[-1] != stage_of(s):
            out.append(stage_of(s))
    return out


def reply(rules: dict[str, Callable[[ScriptedRequest], Any] | dict[str, Any]]) -> Callable[[ScriptedRequest], Any]:
    """A responder by step (`vote.expert`), falling back to a schema-valid default per field."""

    def respond(r: ScriptedRequest) -> Any:
        rule = rules.get(r.tag.step)
        if callable(rule):
            return rule(r)
        if rule is not None:
            return rule
        out: dict[str, Any] = {}
        for name, prop in (fields_of(r.model) if r.model else []):
            if name == "answer":
                out[name] = "A"
            elif "enum" in prop:
                out[name] = prop["enum"][0]
            elif prop.get("type") == "boolean":
                out[name] = False
            else:
                out[name] = f"{r.tag.step} {name}"
        return out

    return respond


# -- MedAgents ------------------------------------------------------------------------------------

MED_ORDER = ["domains", "analysis", "report", "vote", "decision"]


def test_medagents_five_stages_and_16_calls_when_the_first_vote_agrees() -> None:
    result, client = run(method("medagents"), Q4, reply({"vote.expert": {"agree": True, "advice": ""}}))
    assert stages(result) == MED_ORDER
    assert steps(result) == (["domains.question", "domains.option"] + ["analysis.question"] * 5
                             + ["analysis.option"] * 2 + ["report.synthesize"] + ["vote.expert"] * 5
                             + ["decision.answer"])
    assert len(client.requests) == 16
    assert result.summary["attempts"] == 1 and result.summary["consensus"] is True
    assert result.answer == ("A",) and result.correct


def test_medagents_four_of_five_yes_is_no_consensus_and_the_advice_reaches_the_revision() -> None:
    def vote(r: ScriptedRequest) -> dict[str, Any]:
        no = r.tag.round == 1 and r.tag.turn == 3
        return {"agree": not no, "advice": "ADVICE-TOKEN-7" if no else ""}

    revised = {"key_knowledge": "REVISED-TOKEN-9", "total_analysis": "x"}
    result, client = run(method("medagents"), Q4, reply({"vote.expert": vote, "report.revise": revised}))
    assert result.summary["attempts"] == 2 and result.summary["consensus"] is True
    assert len(client.requests) == 16 + 1 + 5  # one revision, one more vote
    revise = [r for r in client.requests if r.tag.step == "report.revise"]
    assert len(revise) == 1 and "ADVICE-TOKEN-7" in revise[0].last
    later = [r for r in client.requests if r.tag.step in ("vote.expert", "decision.answer") and r.tag.round != 1]
    assert later and all("REVISED-TOKEN-9" in r.last for r in later)
    first_votes = [r for r in client.requests if r.tag.step == "vote.expert" and r.tag.round == 1]
    assert not any("REVISED-TOKEN-9" in r.last for r in first_votes)


def test_medagents_stops_after_three_attempts_without_consensus() -> None:
    result, client = run(method("medagents"), Q4, reply({"vote.expert": {"agree": False, "advice": "no"}}))
    assert result.summary["attempts"] == 3 and result.summary["consensus"] is False
    assert steps(result).count("vote.expert") == 15 and steps(result).count("report.revise") == 2
    assert len(client.requests) == 28
    assert any(e.step == "vote.no_consensus" for e in result.events)


def test_medagents_an_invalid_vote_is_not_agreement_and_settings_change_the_counts() -> None:
    def vote(r: ScriptedRequest) -> Any:
        return "not json" if r.tag.turn == 1 and r.tag.round == 1 else {"agree": True, "advice": ""}

    result, client = run(method("medagents", question_domains=3, option_domains=1, max_attempts=2), Q4,
                         reply({"vote.expert": vote}))
    assert result.summary["attempts"] == 2 and result.summary["consensus"] is True
    # 2 domains + 3 + 1 analyses + report + 3 votes (one re-asked, twice) + revise + 3 votes + decision
    assert len(client.requests) == 2 + 3 + 1 + 1 + 4 + 1 + 3 + 1


def test_medagents_an_invalid_decision_is_counted_invalid() -> None:
    result, _ = run(method("medagents"), Q4, reply({"vote.expert": {"agree": True, "advice": ""},
                                                    "decision.answer": {"reasoning": "r", "answer": "Z"},
                                                    "decision.answer:reask": {"reasoning": "r", "answer": "Z"}}))
    assert result.invalid and result.answer == () and not result.correct


# -- MDAgents -------------------------------------------------------------------------------------


def triage(level: str) -> dict[str, Any]:
    return {"triage.complexity": {"reasoning": "r", "complexity": level}}


def test_mdagents_low_routes_solo_without_exemplars() -> None:
    result, client = run(method("mdagents"), Q4, reply(triage("low")))
    assert steps(result) == ["triage.complexity", "solo.answer"] and len(client.requests) == 2
    assert any(e.step == "solo.no_exemplars" for e in result.events)
    assert result.summary["complexity"] == "low" and result.answer == ("A",)


def test_mdagents_low_draws_exemplars_from_the_file_never_the_question(tmp_path: Path) -> None:
    rows = [{"question": f"Exemplar stem EX{i}", "options": {"A": "a", "B": "b"}, "answer_idx": "B"}
            for i in range(6)]
    rows.append({"question": Q4.text, "options": Q4.options, "answer_idx": "A"})
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    rules = {**triage("low"), "solo.rationale": {"rationale": "WHY-TOKEN"}}
    result, client = run(method("mdagents", exemplar_file=str(path)), Q4, reply(rules))
    assert steps(result) == ["triage.complexity"] + ["solo.rationale"] * 5 + ["solo.answer"]
    rationale = [r for r in client.requests if r.tag.step == "solo.rationale"]
    assert all(Q4.text not in r.last and "Exemplar stem EX" in r.last for r in rationale)
    final = client.requests[-1].last
    assert final.count("WHY-TOKEN") == 5 and final.count("Exemplar stem EX") == 5


def test_mdagents_moderate_with_unanimous_initial_answers_skips_the_discussion() -> None:
    result, client = run(method("mdagents"), Q4, reply(triage("moderate")))
    assert steps(result) == (["triage.complexity", "mdt.recruit"] + ["mdt.initial"] * 5 + ["decision.moderator"])
    assert len(client.requests) == 8 and result.summary["rounds_run"] == 0


def split_answers(r: ScriptedRequest) -> dict[str, Any]:
    """expert_1 and expert_2 answer B, the others A: never unanimous."""
    return {"reasoning": "r", "answer": "B" if r.tag.agent in ("expert_1", "expert_2") else "A"}


def test_mdagents_default_is_5_rounds_by_5_turns_when_everyone_keeps_talking() -> None:
    rules = {**triage("moderate"), "mdt.initial": split_answers, "mdt.round_answer": split_answers,
             "mdt.talk": {"talk": True, "to": "everyone", "message": "m"}}
    result, client = run(method("mdagents"), Q4, reply(rules))
    assert result.summary["rounds_run"] == 5 and result.summary["messages"] == 5 * 5 * 5
    assert steps(result).count("mdt.talk") == 125 and steps(result).count("mdt.summary") == 5
    assert len(client.requests) == 1 + 1 + 5 + 5 * (1 + 25 + 5) + 1 == 163
    assert stages(result) == ["triage", "mdt", "decision"]
    tally = next(e for e in result.events if e.step == "decision.tally")
    assert tally.data["answer"] == "A" and tally.data["counts"] == {"B": 2, "A": 3}
    moderator = next(r for r in client.requests if r.tag.step == "decision.moderator")
    assert set(moderator.model.model_json_schema()["properties"]["answer"]["enum"]) == {"A", "B"}


def test_mdagents_a_silent_turn_ends_the_round_and_a_unanimous_round_ends_the_discussion() -> None:
    def round_answer(r: ScriptedRequest) -> dict[str, Any]:
        return {"reasoning": "r", "answer": "A"}

    rules = {**triage("moderate"), "mdt.initial": split_answers, "mdt.round_answer": round_answer,
             "mdt.talk": {"talk": False, "to": "everyone", "message": ""}}
    result, client = run(method("mdagents", rounds=3, turns=4), Q4, reply(rules))
    assert result.summary["rounds_run"] == 1 and result.summary["consensus"] is True
    assert steps(result).count("mdt.talk") == 5  # turn 1 only: nobody talked
    assert len(client.requests) == 1 + 1 + 5 + (1 + 5 + 5) + 1


def test_mdagents_a_message_reaches_only_its_addressee() -> None:
    def talk(r: ScriptedRequest) -> dict[str, Any]:
        if r.tag.agent == "expert_1" and r.tag.round == 1 and r.tag.turn == 1:
            return {"talk": True, "to": "expert_3", "message": "PRIVATE-NOTE-42"}
        return {"talk": False, "to": "everyone", "message": ""}

    rules = {**triage("moderate"), "mdt.initial": split_answers, "mdt.round_answer": split_answers, "mdt.talk": talk}
    result, client = run(method("mdagents", rounds=1, turns=2), Q4, reply(rules))

    def saw(agent: str) -> bool:
        return any("PRIVATE-NOTE-42" in json.dumps(r.messages) for r in client.requests if r.tag.agent == agent)

    assert saw("expert_3") and not saw("expert_2") and not saw("expert_4")
    message = next(e for e in result.events if e.step == "mdt.message")
    assert message.data == {"from": "expert_1", "to": ["expert_3"]}


def test_mdagents_high_runs_three_teams_in_order_and_later_teams_read_earlier_reports() -> None:
    def report(r: ScriptedRequest) -> dict[str, Any]:
        return {"text": f"REPORT-OF-TEAM-{r.tag.round}"}

    result, client = run(method("mdagents"), Q4, reply({**triage("high"), "ict.report": report}))
    assert steps(result) == (["triage.complexity", "ict.recruit"]
                             + ["ict.plan", "ict.investigate", "ict.investigate", "ict.report"] * 3
                             + ["decision.answer"])
    assert len(client.requests) == 15
    plan3 = next(r for r in client.requests if r.tag.step == "ict.plan" and r.tag.round == 3)
    assert "REPORT-OF-TEAM-1" in plan3.last and "REPORT-OF-TEAM-2" in plan3.last
    plan1 = next(r for r in client.requests if r.tag.step == "ict.plan" and r.tag.round == 1)
    assert "REPORT-OF-TEAM" not in plan1.last
    assert all(f"REPORT-OF-TEAM-{g}" in client.requests[-1].last for g in (1, 2, 3))


def test_mdagents_an_invalid_triage_routes_low_and_says_so() -> None:
    rules = {"triage.complexity": "??", "triage.complexity:reask": "??"}
    result, _ = run(method("mdagents"), Q4, reply(rules))
    assert result.summary["complexity"] == "low" and result.summary["route_from"] == "invalid_triage"
    assert any(e.step == "triage.invalid" for e in result.events)


def test_mdagents_an_invalid_moderator_falls_back_to_the_majority() -> None:
    rules = {**triage("moderate"), "mdt.initial": split_answers, "mdt.round_answer": split_answers,
             "mdt.talk": {"talk": False, "to": "everyone", "message": ""},
             "decision.moderator": "x", "decision.moderator:reask": "x"}
    result, _ = run(method("mdagents", rounds=1, turns=1), Q4, reply(rules))
    assert result.answer == ("A",) and result.summary["rule"] == "majority_after_invalid_moderator"


# -- KAMAC ----------------------------------------------------------------------------------------

NO_GAP = {"gap": False, "expert": "", "reason": ""}


def test_kamac_starts_from_one_agent_and_stops_when_nobody_reports_a_gap() -> None:
    result, client = run(method("kamac"), Q4, reply({"gap.assess": NO_GAP}))
    assert steps(result) == ["recruit.initial", "assess.initial", "gap.assess", "decision.moderator"]
    assert len(client.requests) == 4
    assert result.summary["ended_by"] == "no_gap" and result.summary["recruited"] == []
    assert result.answer == ("A",)


def test_kamac_a_gap_recruits_a_specialist_who_sees_why_and_joins_the_discussion() -> None:
    def gap(r: ScriptedRequest) -> dict[str, Any]:
        if r.tag.turn == 1:
            return {"gap": True, "expert": "toxicologist", "reason": "GAP-REASON-5"}
        return NO_GAP

    rules = {"gap.assess": gap, "gap.recruit": {"count": 1, "expert_1": "toxicologist", "expert_2": ""}}
    result, client = run(method("kamac"), Q4, reply(rules))
    assert steps(result) == ["recruit.initial", "assess.initial", "gap.assess", "gap.recruit", "assess.recruited",
                             "discussion.comment", "discussion.comment", "gap.assess", "gap.assess",
                             "decision.moderator"]
    assert len(client.requests) == 10
    assert result.summary["recruited"] == [{"round": 1, "turn": 1, "agent": "specialist_2",
                                            "specialty": "toxicologist"}]
    joined = next(r for r in client.requests if r.tag.step == "assess.recruited")
    assert "GAP-REASON-5" in joined.last and "toxicologist" in joined.system
    recruit = next(r for r in client.requests if r.tag.step == "gap.recruit")
    assert "GAP-REASON-5" in recruit.last


def test_kamac_a_skipped_recruitment_still_discusses_for_the_three_turns() -> None:
    rules = {"gap.assess": {"gap": True, "expert": "x", "reason": "y"},
             "gap.recruit": {"count": 0, "expert_1": "", "expert_2": ""}}
    result, client = run(method("kamac"), Q4, reply(rules))
    assert result.summary["turns_run"] == 3 and result.summary["ended_by"] == "turns"
    assert len(client.requests) == 1 + 1 + 3 * (1 + 1 + 1) + 1


def test_kamac_never_recruits_past_max_agents() -> None:
    rules = {"gap.assess": {"gap": True, "expert": "x", "reason": "y"},
             "gap.recruit": {"count": 2, "expert_1": "cardiologist", "expert_2": "nephrologist"}}
    result, client = run(method("kamac", max_agents=3), Q4, reply(rules))
    assert [x["specialty"] for x in result.summary["recruited"]] == ["cardiologist", "nephrologist"]
    assert steps(result).count("gap.recruit") == 1  # turns 2 and 3: the panel is full, no recruiter call
    assert sum(e.step == "gap.panel_full" for e in result.events) == 2
    # recruit, assess, t1: gap + recruiter + 2 joined + 3 comments, t2 and t3: 3 gaps + 3 comments, moderator
    assert len(client.requests) == 1 + 1 + (1 + 1 + 2 + 3) + 2 * (3 + 3) + 1


def test_kamac_a_multi_answer_set_is_one_position_for_the_moderator() -> None:
    from .scripted_helpers import QMULTI

    rules = {"gap.assess": NO_GAP, "assess.initial": {"reasoning": "r", "answer": ["C", "A"]},
             "decision.moderator": {"reasoning": "r", "answer": "A,C"}}
    result, client = run(method("kamac"), QMULTI, reply(rules))
    moderator = next(r for r in client.requests if r.tag.step == "decision.moderator")
    prop = moderator.model.model_json_schema()["properties"]["answer"]
    assert prop.get("enum", [prop.get("const")]) == ["A,C"]  # a one-value Literal is a `const`
    assert result.answer == ("A", "C") and result.correct


# -- settings, the scenario, a scripted run -----------------------------------------------------------


@pytest.mark.parametrize("pipeline,settings,field", [
    ("medagents", "{max_attempts: 0}", "max_attempts"),
    ("mdagents", "{rounds: 0}", "rounds"),
    ("mdagents", "{exemplar_file: nope.jsonl}", "exemplar_file"),
    ("kamac", "{initial_agents: 3, max_agents: 2}", "max_agents"),
    ("kamac", "{turn: 3}", "turn"),
])
def test_bad_settings_are_one_line_exit_2(tmp_path: Path, pipeline: str, settings: str, field: str) -> None:
    from .test_bad_inputs import invoke

    path = write(tmp_path / "s.yaml", f"name: x\npipeline: {pipeline}\nsettings: {settings}\n"
                                      "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n")
    res = invoke(["validate", str(path)])
    assert res.rc == 2 and not res.tb
    assert field in res.err and len(res.err.strip().splitlines()) == 1


def test_the_scenario_runs_the_three_methods_on_the_sample_set_to_a_report(tmp_path: Path) -> None:
    text = (REPO / "scenarios/multiagent_methods.yaml").read_text()
    text = text.replace("model: {backend: local, max_tokens: 256}", "model: {backend: scripted}")
    text = text.replace("run: {workers: 4, max_errors: 10}", "run: {workers: 2, max_errors: 0}")
    text = text.replace("dataset: {source: sample}", "dataset: {source: sample, limit: 3}")
    path = write(tmp_path / "m.yaml", text)
    runner = Runner.create(make_plan(load_scenario(path), base_dir=tmp_path), run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    store = Store(f"sqlite:///{tmp_path / 'run' / 'study.db'}", tmp_path / "run")
    try:
        rows = store.rows()
    finally:
        store.close()
    assert sorted({r.condition for r in rows}) == ["kamac", "mdagents", "medagents"]
    assert len(rows) == 3 * 6  # the limit is per subset: 2 subsets x 3 questions
    assert all(r.error is None for r in rows)
    tables = build_tables(rows, load_meta(tmp_path / "run"), n_boot=200)
    accuracy = tables[0]
    assert {"medagents", "mdagents", "kamac"} <= {str(cell) for row in accuracy.rows for cell in row}


# The three on the embedded model: tests/test_benchmark_methods.py::test_every_table7_method_runs_on_the_embedded_model
