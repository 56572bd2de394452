"""MDAgents as MedAgentsBench's copy runs it (`xk-huang/medagents-benchmark`,
`baselines/MDAgents/utils.py` @56ca11e) and, as the `original` variant, as mitmedialab/MDAgents
(`utils.py` @3adbd76) does. Expected counts are counted by hand from those files (the benchmark's
answer-parser call, replaced here by the structured answer, is not counted); each test names its
lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medpanel.agents.model.scripted import ScriptedRequest

from .multiagent_helpers import method, reply, seen_by, sent, steps
from .scripted_helpers import Q4, run


def triage(level: str) -> dict[str, Any]:
    return {"triage.complexity": {"reasoning": "r", "complexity": level}}


MODERATE = triage("moderate")
TALK_ALL = {"debate.talk": {"talk": True}, "debate.choose": {"experts": [1, 2, 3, 4, 5]},
            "debate.message": {"message": "m"}}


def exemplar_file(tmp_path: Path) -> Path:
    rows = [{"question": f"Exemplar stem EX{i}", "options": {"A": "a", "B": "b"}, "answer_idx": "B"} for i in range(6)]
    rows.append({"question": Q4.text, "options": Q4.options, "answer_idx": "A"})
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_unanimous_first_answers_still_discuss_and_a_silent_first_turn_ends_it() -> None:
    """utils.py 406-504: no unanimity check anywhere. The recruiter writes the five exemplars'
    rationales (415; here the builtin exemplars), round 1 runs its summary (450-457) and turn 1 asks
    every expert whether it wants to talk (467); nobody does, so both loops break (490-494); the
    final answers are collected once (496-504), then the moderator (539-545).
    1 + 1 + 5 + 5 + 1 + 5 + 5 + 1 = 24."""
    result, client = run(method("mdagents"), Q4, reply(MODERATE))
    assert steps(result) == (["triage.complexity", "mdt.recruit"] + ["mdt.rationale"] * 5 + ["mdt.initial"] * 5
                             + ["debate.summary"] + ["debate.talk"] * 5 + ["mdt.final"] * 5 + ["decision.moderator"])
    assert len(client.requests) == 24
    assert result.summary["rounds_run"] == 1 and result.summary["ended_by"] == "silence"


def test_a_silent_turn_ends_the_whole_discussion_not_only_its_round() -> None:
    """utils.py 459-494: `if num_yes == 0: break` leaves the turns, then the same test leaves the
    rounds. expert_1 talks (to expert_2) in round 1 turns 1 and 2; turn 3 is silent: no round 2.
    1 + 1 + 5 rationales + 5 + 1 + 3 x 5 talk + 2 choose + 2 message + 5 final + 1 = 38."""
    def talk(r: ScriptedRequest) -> dict[str, Any]:
        return {"talk": r.tag.agent == "expert_1" and r.tag.turn < 3}

    rules = {**MODERATE, "debate.talk": talk, "debate.choose": {"experts": [2]}}
    result, client = run(method("mdagents"), Q4, reply(rules))
    assert len(client.requests) == 38
    assert steps(result).count("debate.summary") == 1 and steps(result).count("mdt.final") == 5
    assert result.summary["turns_run"] == 3 and result.summary["messages"] == 2


def test_everyone_writing_to_everyone_runs_5_by_5_at_most_898_calls() -> None:
    """utils.py 406-504: 5 rationales, then 5 rounds x 5 turns; per turn each of 5 experts: talk
    (467), choose (472), one message per chosen expert (478-484; all five, itself included, as the
    parser allows). 1 + 1 + 5 + 5 + 5 x (1 + 5 x (5 + 5 + 25)) + 5 + 1 = 898."""
    result, client = run(method("mdagents"), Q4, reply({**MODERATE, **TALK_ALL}))
    assert len(client.requests) == 898
    assert result.summary["rounds_run"] == 5 and result.summary["turns_run"] == 25
    assert steps(result).count("mdt.final") == 5  # once, after the discussion


def test_the_original_reanswers_after_every_round_and_the_benchmark_once() -> None:
    """mitmedialab/MDAgents utils.py 366-413: the final answers sit inside the round loop, after the
    turns; MedAgentsBench's copy (496-504) moved them after it. 2 rounds x 1 turn, everyone talks to
    expert 1: benchmark 5 final answers, original 10."""
    rules = {**MODERATE, **TALK_ALL, "debate.choose": {"experts": [1]}}
    bench, bc = run(method("mdagents", rounds=2, turns=1), Q4, reply(rules))
    orig, oc = run(method("mdagents", "original", rounds=2, turns=1), Q4, reply(rules))
    assert steps(bench).count("mdt.final") == 5 and steps(orig).count("mdt.final") == 10
    assert len(oc.requests) == len(bc.requests) + 5
    assert [r.tag.round for r in sent(oc, "mdt.final")] == [1] * 5 + [2] * 5


def test_the_original_collects_no_final_answers_when_the_first_round_ends_silent() -> None:
    """mitmedialab/MDAgents utils.py 401-413: the silent-turn break skips the answers, so
    `final_answer` stays None and the moderator (451) is shown no answers."""
    result, client = run(method("mdagents", "original"), Q4, reply(MODERATE))
    assert "mdt.final" not in steps(result)
    (moderator,) = sent(client, "decision.moderator")
    assert "(none)" in moderator.last
    assert set(moderator.model.model_json_schema()["properties"]["answer"]["enum"]) == set(Q4.letters)
    assert result.summary["rule"] == "moderator_without_answers" and result.answer == ("A",)


def test_mdt_experts_get_the_recruiters_rationales_for_the_exemplars_in_their_first_prompt(tmp_path: Path) -> None:
    """utils.py 406-444: the recruiter (`tmp_agent`) writes one rationale per exemplar in its own
    history (415), and every expert's first prompt carries the exemplars with them (440)."""
    def rationale(r: ScriptedRequest) -> dict[str, Any]:
        return {"rationale": f"WHY-{r.tag.turn}"}

    rules = {**MODERATE, "mdt.rationale": rationale}
    _, client = run(method("mdagents", exemplar_file=str(exemplar_file(tmp_path))), Q4, reply(rules))
    rationales = sent(client, "mdt.rationale")
    assert len(rationales) == 5 and {r.tag.agent for r in rationales} == {"recruiter"}
    assert all(f"WHY-{i}" in json.dumps(rationales[-1].messages) for i in range(1, 5))  # its own history
    for r in sent(client, "mdt.initial"):
        assert all(f"WHY-{i}" in r.last for i in range(1, 6)) and r.last.count("Exemplar stem EX") == 5
    assert len(client.requests) == 19 + 5


def test_the_assistants_summary_reaches_no_expert() -> None:
    """utils.py 450-457: the summary (`report`) is written and never used in a later prompt."""
    rules = {**MODERATE, **TALK_ALL, "debate.summary": {"key_knowledge": "SUMMARY-TOKEN", "total_analysis": "t"}}
    _, client = run(method("mdagents", rounds=2, turns=1), Q4, reply(rules))
    assert sent(client, "debate.summary")
    assert not any(seen_by(client, f"expert_{i}", "SUMMARY-TOKEN") for i in range(1, 6))


def test_a_message_reaches_its_addressee_only_through_a_later_talk_prompt_of_the_same_turn() -> None:
    """utils.py 464-484: the talk prompt shows the initial opinions in round 1 and, later, the
    turn's log of messages to that expert (`all_comments`, filled by experts earlier in the order).
    expert_1 writes to expert_3 in round 1 (never delivered) and in round 2 (seen by expert_3's
    round 2 talk prompt, and by nobody else)."""
    def talk(r: ScriptedRequest) -> dict[str, Any]:
        return {"talk": r.tag.agent == "expert_1"}

    def message(r: ScriptedRequest) -> dict[str, Any]:
        return {"message": f"NOTE-ROUND-{r.tag.round}"}

    rules = {**MODERATE, "debate.talk": talk, "debate.choose": {"experts": [3]}, "debate.message": message}
    _, client = run(method("mdagents", rounds=2, turns=1), Q4, reply(rules))
    assert not seen_by(client, "expert_3", "NOTE-ROUND-1")
    (talk3,) = sent(client, "debate.talk", agent="expert_3", round=2)
    assert "NOTE-ROUND-2" in talk3.last
    assert not any(seen_by(client, f"expert_{i}", "NOTE-ROUND-") for i in (2, 4, 5))
    assert seen_by(client, "expert_1", "NOTE-ROUND-1")  # the sender keeps it in its own history


def test_ict_teams_work_alone_the_review_team_runs_twice_and_the_decider_reads_the_initial_team() -> None:
    """utils.py 564-644 with `Group.interact` 140-189: the Initial Assessment Team, then every other
    team (the review team among them), then the review team again; no team reads another's report,
    and the decision prompt (641) carries `initial_assessment_report` only.
    1 + 1 + 4 x (1 lead plan + 2 investigations + 1 lead answer) + 1 = 19."""
    def report(r: ScriptedRequest) -> dict[str, Any]:
        return {"text": f"REPORT-OF-TEAM-{r.tag.round}"}

    result, client = run(method("mdagents"), Q4, reply({**triage("high"), "ict.report": report}))
    assert steps(result) == (["triage.complexity", "ict.recruit"]
                             + ["ict.plan", "ict.investigate", "ict.investigate", "ict.report"] * 4
                             + ["decision.answer"])
    assert len(client.requests) == 19
    assert [r.tag.round for r in sent(client, "ict.plan")] == [1, 2, 3, 3]
    for team in (2, 3):
        assert not any("REPORT-OF-TEAM-1" in json.dumps(r.messages) for r in client.requests
                       if r.tag.agent.startswith(f"team_{team}_"))
    decision = client.requests[-1].last
    assert "REPORT-OF-TEAM-1" in decision and "REPORT-OF-TEAM-2" not in decision
    assert "REPORT-OF-TEAM-3" not in decision


def test_low_route_rationales_share_one_history_and_never_use_the_question(tmp_path: Path) -> None:
    """utils.py 315-341: one `medical_agent` writes the five rationales in one history (327); the
    single agent then answers with them. 1 + 5 + 1 = 7."""
    def rationale(r: ScriptedRequest) -> dict[str, Any]:
        return {"rationale": f"WHY-{r.tag.turn}"}

    rules = {**triage("low"), "solo.rationale": rationale}
    result, client = run(method("mdagents", exemplar_file=str(exemplar_file(tmp_path))), Q4, reply(rules))
    assert steps(result) == ["triage.complexity"] + ["solo.rationale"] * 5 + ["solo.answer"]
    rationales = sent(client, "solo.rationale")
    assert all(Q4.text not in r.last for r in rationales)
    assert "WHY-4" in json.dumps(rationales[-1].messages)
    assert all(f"WHY-{i}" in client.requests[-1].last for i in range(1, 6))


def test_low_route_with_the_builtin_exemplars_and_without_any() -> None:
    result, client = run(method("mdagents"), Q4, reply(triage("low")))
    assert steps(result) == ["triage.complexity"] + ["solo.rationale"] * 5 + ["solo.answer"]
    assert len(result.summary["exemplars"]) == 5
    result, client = run(method("mdagents", exemplar_file=None), Q4, reply(triage("low")))
    assert steps(result) == ["triage.complexity", "solo.answer"] and len(client.requests) == 2
    assert any(e.step == "exemplars.none" for e in result.events)


def test_no_mdagents_call_sets_a_reply_cap() -> None:
    """Neither code passes `max_tokens` (`Agent.chat` 71-79, `temp_responses` 90-106)."""
    _, client = run(method("mdagents", rounds=1, turns=1), Q4, reply({**MODERATE, **TALK_ALL}))
    assert client.requests and all("max_tokens" not in r.extra for r in client.requests)


def test_an_invalid_triage_routes_low_and_an_invalid_moderator_falls_back_to_the_majority() -> None:
    result, _ = run(method("mdagents"), Q4, reply({"triage.complexity": "??", "triage.complexity:reask": "??"}))
    assert result.summary["complexity"] == "low" and result.summary["route_from"] == "invalid_triage"

    def final(r: ScriptedRequest) -> dict[str, Any]:
        return {"reasoning": "r", "answer": "B" if r.tag.agent in ("expert_1", "expert_2") else "A"}

    rules = {**MODERATE, "mdt.final": final, "decision.moderator": "x", "decision.moderator:reask": "x"}
    result, _ = run(method("mdagents"), Q4, reply(rules))
    assert result.answer == ("A",) and result.summary["rule"] == "majority_after_invalid_moderator"


def test_a_test_split_is_refused_as_the_exemplar_file(tmp_path: Path) -> None:
    import pytest
    from pydantic import ValidationError

    from medpanel.methods.mdagents.pipeline import MDAgentsSettings

    path = tmp_path / "test_hard.jsonl"
    path.write_text(exemplar_file(tmp_path).read_text())
    with pytest.raises(ValidationError, match="test split"):
        MDAgentsSettings(exemplar_file=str(path))
    assert MDAgentsSettings(exemplar_file=str(tmp_path / "train.jsonl")).exemplar_file


def test_no_expert_is_told_the_hierarchy() -> None:
    """utils.py 370-398: the recruiter's "Hierarchy:" lines only build the printed tree (`parse_hierarchy`
    194-223, `print_tree` 425); each expert's instruction names its role and description and asks it to
    collaborate with the other experts as a team (393-396), the same words for every expert."""
    rules = {**MODERATE, "mdt.recruit": {**{f"expert_{i}": f"SPECIALTY-{i}" for i in range(1, 6)}, "lead": 2}}
    result, client = run(method("mdagents"), Q4, reply(rules))
    systems = {r.tag.agent: r.system for r in client.requests if r.tag.role == "mdt_expert"}
    assert len(systems) == 5
    for i in range(1, 6):
        assert systems[f"expert_{i}"] == systems["expert_1"].replace("SPECIALTY-1", f"SPECIALTY-{i}")
        assert "lead" not in systems[f"expert_{i}"].lower() and "report" not in systems[f"expert_{i}"].lower()
    assert result.summary["lead"] == "expert_2"  # recorded, as the code prints it


def test_the_moderator_may_choose_any_option_as_the_codes_free_reply_allows() -> None:
    """utils.py 539-557: the moderator replies in free text and the parser takes any single letter of
    the question's; nothing limits it to the experts' answers. Every expert says A; the moderator
    is offered every option and its C stands."""
    rules = {**MODERATE, "mdt.final": {"reasoning": "r", "answer": "A"},
             "decision.moderator": {"reasoning": "r", "answer": "C"}}
    result, client = run(method("mdagents"), Q4, reply(rules))
    (moderator,) = sent(client, "decision.moderator")
    assert moderator.model.model_json_schema()["properties"]["answer"]["enum"] == Q4.letters
    assert result.answer == ("C",) and result.summary["rule"] == "moderator"


def test_no_reply_is_asked_to_keep_to_a_number_of_sentences_the_codes_do_not_set() -> None:
    """The ICT's lead and members reply in free text (`Group.interact` 140-189), the experts' answers
    and the decision too (440, 498, 641); only the exemplar rationales ask for "1-2 sentences" (415)."""
    for level in ("moderate", "high"):
        _, client = run(method("mdagents", rounds=1, turns=1), Q4, reply({**triage(level), **TALK_ALL}))
        for r in client.requests:
            if r.tag.step == "mdt.rationale":
                continue
            fields = json.dumps(r.model.model_json_schema()) if r.model else ""
            assert "sentence" not in fields and "Brief" not in fields, (level, r.tag.step)
