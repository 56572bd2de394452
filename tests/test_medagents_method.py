"""MedAgents as MedAgentsBench's copy runs it (`xk-huang/medagents-benchmark`, `baselines/MedAgents/`
@56ca11e) and, as the `original` variant, as gersteinlab/MedAgents (@aaeff04) does. Every expected
count is counted by hand from those files; each test names the lines it follows."""

from __future__ import annotations

from typing import Any

from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import Question

from .multiagent_helpers import method, reply, sent, stages, steps
from .scripted_helpers import Q4, run

YES = {"vote.expert": {"agree": True}}
SETUP = ["domains.question", "domains.option"] + ["analysis.question"] * 5 + ["analysis.option"] * 2 \
    + ["report.synthesize"]


def test_all_seven_domain_experts_vote_and_a_unanimous_first_vote_costs_18_calls() -> None:
    """`baselines/MedAgents/utils.py` 89-131: `all_domains = question_domains + options_domains` (5 + 2,
    `prompt_utils.py` 3-4) vote on the report; no "no" ends the loop; one final-answer call.
    2 + 5 + 2 + 1 + 7 + 1 = 18."""
    result, client = run(method("medagents"), Q4, reply(YES))
    assert stages(result) == ["domains", "analysis", "report", "vote", "decision"]
    assert steps(result) == SETUP + ["vote.expert"] * 7 + ["decision.answer"]
    assert len(client.requests) == 18
    voters = [r.tag.agent for r in sent(client, "vote.expert")]
    assert voters == [f"question_expert_{i}" for i in range(1, 6)] + ["option_expert_1", "option_expert_2"]
    assert result.summary["attempts"] == 1 and result.summary["revisions"] == 0 and result.answer == ("A",)


def test_a_no_is_followed_by_its_own_advice_call_and_the_revision_reads_the_advice() -> None:
    """`utils.py` 103-123: the vote is one call, and only a "no" adds the voter's advice call
    (`get_consensus_opinion_prompt`); any "no" adds one revision call, then the experts vote again.
    One "no" (option_expert_2, attempt 1): 10 + (7 + 1 + 1) + 7 + 1 = 27."""
    def vote(r: ScriptedRequest) -> dict[str, Any]:
        return {"agree": not (r.tag.round == 1 and r.tag.agent == "option_expert_2")}

    rules = {"vote.expert": vote, "vote.advice": {"revisions": "ADVICE-TOKEN-7"},
             "report.revise": {"total_analysis": "REVISED-TOKEN-9"}}
    result, client = run(method("medagents"), Q4, reply(rules))
    assert len(client.requests) == 27
    advice = sent(client, "vote.advice")
    assert [r.tag.agent for r in advice] == ["option_expert_2"]
    assert "ADVICE-TOKEN-7" not in " ".join(r.last for r in sent(client, "vote.expert"))  # the vote stays short
    (revise,) = sent(client, "report.revise")
    assert "ADVICE-TOKEN-7" in revise.last
    assert all("REVISED-TOKEN-9" in r.last for r in sent(client, "vote.expert", round=2))
    assert not any("REVISED-TOKEN-9" in r.last for r in sent(client, "vote.expert", round=1))
    assert result.summary["attempts"] == 2 and result.summary["consensus"] is True


def test_after_the_last_failed_vote_the_report_is_revised_once_more_and_the_decision_reads_it() -> None:
    """`utils.py` 96-131: `while num_try < max_attempt_vote and hasno_flag`; every failed vote
    revises (the third included) and the final answer reads the latest `syn_report`.
    All "no": 10 + 3 x (7 votes + 7 advice + 1 revision) + 1 = 56."""
    def revise(r: ScriptedRequest) -> dict[str, Any]:
        return {"total_analysis": f"REVISION-{r.tag.round}"}

    rules = {"vote.expert": {"agree": False}, "vote.advice": {"revisions": "x"}, "report.revise": revise}
    result, client = run(method("medagents"), Q4, reply(rules))
    assert len(client.requests) == 56
    assert steps(result).count("report.revise") == 3 and steps(result).count("vote.advice") == 21
    decision = client.requests[-1]
    assert decision.tag.step == "decision.answer" and "REVISION-3" in decision.last
    assert "REVISION-2" not in decision.last
    assert result.summary["attempts"] == 3 and result.summary["revisions"] == 3
    assert result.summary["consensus"] is False


def test_the_classifier_and_the_question_analysts_see_the_stem_only() -> None:
    """`utils.py` 28-63 with `prompt_utils.py` 7-24 and 27-51: the question-domain prompt and the
    question analysis get `question` alone; the option-domain prompt and the option analysis get
    the options too; the voters read the cleaned report, which carries both (`data_utils.py` 139-157)."""
    q = Question(dataset="unit", qid="s1", text="STEM-TOKEN: a 30-year-old with chest pain.",
                 options={"A": "OPT-TOKEN-A", "B": "OPT-TOKEN-B", "C": "OPT-TOKEN-C"}, gold=("A",))
    _, client = run(method("medagents"), q, reply(YES))
    for step in ("domains.question", "analysis.question"):
        reqs = sent(client, step)
        assert reqs and all("STEM-TOKEN" in r.last and "OPT-TOKEN" not in str(r.messages) for r in reqs)
    for step in ("domains.option", "analysis.option", "vote.expert"):
        reqs = sent(client, step)
        assert reqs and all("STEM-TOKEN" in r.last and "OPT-TOKEN-B" in r.last for r in reqs)


def test_an_unparseable_vote_counts_as_yes_and_is_recorded() -> None:
    """`data_utils.py` 176-183 (`cleansing_voting`): a reply with neither yes nor no is read as "yes".
    question_expert_1's vote fails twice (ask and re-ask); no advice call, no revision: 18 + 1 re-ask."""
    def vote(r: ScriptedRequest) -> Any:
        return "not json" if r.tag.agent == "question_expert_1" else {"agree": True}

    rules = {"vote.expert": vote, "vote.expert:reask": vote}
    result, client = run(method("medagents"), Q4, reply(rules))
    assert len(client.requests) == 19 and not sent(client, "vote.advice") and not sent(client, "report.revise")
    tally = next(e for e in result.events if e.step == "vote.consensus")
    assert tally.data["unparsed_as_yes"] == 1 and tally.data["yes"] == 7
    assert result.summary["consensus"] is True


def test_reply_caps_benchmark_none_original_per_stage() -> None:
    """MedAgentsBench's `api_utils.py` 23-56 sends no `max_tokens`; gersteinlab/MedAgents `utils.py`
    22-103 caps each call: domains 50, analyses 300, synthesis 2500, vote 30, advice 500, revision
    2500, final answer 2500."""
    rules = {"vote.expert": lambda r: {"agree": r.tag.round == 2}, "vote.advice": {"revisions": "x"}}
    _, bench = run(method("medagents"), Q4, reply(rules))
    assert all("max_tokens" not in r.extra for r in bench.requests)
    _, orig = run(method("medagents", "original"), Q4, reply(rules))
    caps = {r.tag.step: r.extra.get("max_tokens") for r in orig.requests}
    assert caps == {"domains.question": 50, "domains.option": 50, "analysis.question": 300,
                    "analysis.option": 300, "report.synthesize": 2500, "vote.expert": 30, "vote.advice": 500,
                    "report.revise": 2500, "decision.answer": 2500}
    assert len(orig.requests) == len(bench.requests) == 10 + (7 + 7 + 1) + 7 + 1


def test_settings_change_the_counts() -> None:
    """3 + 1 domains, 2 attempts, every vote "no": 2 + 4 + 1 + 2 x (4 + 4 + 1) + 1 = 26."""
    rules = {"vote.expert": {"agree": False}, "vote.advice": {"revisions": "x"}}
    result, client = run(method("medagents", question_domains=3, option_domains=1, max_attempts=2), Q4,
                         reply(rules))
    assert len(client.requests) == 26 and result.summary["attempts"] == 2


def test_an_invalid_decision_is_counted_invalid() -> None:
    rules = {**YES, "decision.answer": {"reasoning": "r", "answer": "Z"},
             "decision.answer:reask": {"reasoning": "r", "answer": "Z"}}
    result, _ = run(method("medagents"), Q4, reply(rules))
    assert result.invalid and result.answer == () and not result.correct


def test_the_stage_caps_reach_the_endpoint_in_each_request_body(monkeypatch: Any) -> None:
    """Over HTTP (the OpenAI client path, the fake endpoint): the `original` variant's vote bodies
    carry `max_tokens` 30 and its advice bodies 500; the default sends the model block's cap on
    every call. The endpoint's schema replies vote "no" (false) every time: 56 calls each."""
    import asyncio
    import json

    from medpanel.agents.model.spec import ModelSpec
    from medpanel.agents.pipelines.run import run_question

    from .fake_openai import FakeOpenAI, completion, schema_reply

    monkeypatch.setenv("MP_TEST_KEY", "sk-test")

    def bodies(variant: str | None) -> list[dict[str, Any]]:
        with FakeOpenAI(lambda body, n: (200, {}, completion(json.dumps(schema_reply(body))))) as srv:
            spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, api_key_env="MP_TEST_KEY",
                             cache="off", max_tokens=700)
            asyncio.run(run_question(method("medagents", variant), Q4, spec))
            return list(srv.requests)

    def fields(body: dict[str, Any]) -> set[str]:
        return set(body["response_format"]["json_schema"]["schema"]["properties"])

    original, default = bodies("original"), bodies(None)
    assert len(original) == len(default) == 56
    assert {b["max_tokens"] for b in original if fields(b) == {"agree"}} == {30}
    assert {b["max_tokens"] for b in original if fields(b) == {"revisions"}} == {500}
    assert {b["max_tokens"] for b in original} == {50, 300, 2500, 30, 500}
    assert {b["max_tokens"] for b in default} == {700}


def test_analyses_are_asked_for_no_length_and_the_decision_for_the_letter_alone() -> None:
    """MedAgentsBench's `prompt_utils.py` 17-24 and 38-51 ask for the analyses with no limit (its
    `utils.py` 49 and 59 set no cap; gersteinlab/MedAgents caps their tokens at 300, `utils.py` 38 and 46,
    which the `original` variant sends as `max_tokens`); `get_final_answer_prompt_wsyn` (`prompt_utils.py`
    79-87; the original's `prompt_generator.py` 78-86) asks for the chosen option's letter and nothing
    else, so the decision's reply holds the answer and no reasoning."""
    for variant in (None, "original"):
        result, client = run(method("medagents", variant), Q4, reply(YES))
        analyses = [r for r in client.requests if r.tag.step.startswith("analysis.")]
        assert len(analyses) == 7
        for r in analyses:
            assert r.model.model_json_schema()["properties"]["analysis"]["description"] == "Your analysis."
        (decision,) = sent(client, "decision.answer")
        assert list(decision.model.model_json_schema()["properties"]) == ["answer"], variant
        assert result.answer == ("A",)
