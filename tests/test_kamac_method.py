"""KAMAC as its code runs it (AnonymousSubmission361/KAMAC `main_kamac.py` @e1271d4, with the README's
`--auto_recruit` and the defaults of `inference()`: 1 agent, 1 round x 3 turns). Expected counts are
counted by hand from that file; each test names its lines."""

from __future__ import annotations

import json
from typing import Any

from medpanel.agents.model.scripted import ScriptedRequest

from .multiagent_helpers import method, reply, seen_by, sent, steps
from .scripted_helpers import Q4, run

GAP = {"gap": True, "expert": "toxicologist", "reason": "GAP-REASON-5"}
SELF_TALK = {"debate.talk": {"talk": True}, "debate.choose": {"experts": [1]}, "debate.message": {"message": "m"}}


def test_a_turn_without_a_gap_but_with_talk_goes_on_for_the_three_turns() -> None:
    """`start_discuss` 539-645 and `consensus` 1044-1099: a turn ends the discussion only when
    `num_yes == 0` (619-625); with talk and no gap everyone answers again (1069-1097) and the next
    turn starts. Per turn: talk, choose, one message (`discuss` 984-1013), gap (`ask_gap` 669-740),
    answer: 1 + 1 + 3 x 5 + 1 = 18."""
    result, client = run(method("kamac"), Q4, reply(SELF_TALK))
    assert steps(result) == (["recruit.initial", "assess.initial"]
                             + ["debate.talk", "debate.choose", "debate.message", "gap.assess",
                                "discussion.answer"] * 3 + ["decision.moderator"])
    assert len(client.requests) == 18
    assert result.summary["turns_run"] == 3 and result.summary["ended_by"] == "turns"


def test_a_silent_turn_without_a_gap_ends_the_discussion() -> None:
    """619-625: no talk and no gap breaks out. recruit, assess, talk, gap, moderator = 5."""
    result, client = run(method("kamac"), Q4, reply({}))
    assert steps(result) == ["recruit.initial", "assess.initial", "debate.talk", "gap.assess", "decision.moderator"]
    assert len(client.requests) == 5 and result.summary["ended_by"] == "silence"


def test_a_gap_recruits_as_many_as_the_recruiter_names_and_they_assess_seeing_the_panel() -> None:
    """`respond_gap` 742-941: the assistant sifts the gap reports (755-763), the recruiter names new
    experts with no cap (764-781, 790-810), each assesses shown the opinions (848-872) and takes
    its talk turn (886-903); nobody talks, so the discussion ends (619-625).
    1 + 1 + (talk + gap + sift + recruit + 3 assessments + 3 talks) + 1 = 13."""
    def gap(r: ScriptedRequest) -> dict[str, Any]:
        return GAP if r.tag.turn == 1 and r.tag.agent == "specialist_1" else {"gap": False, "expert": "", "reason": ""}

    rules = {"assess.initial": {"reasoning": "FIRST-OPINION-3", "answer": "A"}, "gap.assess": gap,
             "assess.recruited": {"reasoning": "JOINED-OPINION", "answer": "B"},
             "gap.summary": {"recommendations": "SIFTED-TOKEN"},
             "gap.recruit": {"count": 3, **{f"expert_{i}": s for i, s in
                                            enumerate(["toxicologist", "nephrologist", "cardiologist"]
                                                      + [""] * 6, 1)}}}
    result, client = run(method("kamac"), Q4, reply(rules))
    assert len(client.requests) == 13
    assert [x["specialty"] for x in result.summary["recruited"]] == ["toxicologist", "nephrologist", "cardiologist"]
    (sift,) = sent(client, "gap.summary")
    assert "GAP-REASON-5" in sift.last
    (recruit,) = sent(client, "gap.recruit")
    assert "SIFTED-TOKEN" in recruit.last and recruit.tag.agent == "recruiter"
    assert "GAP-REASON-5" not in recruit.last  # it reads the sifted list, not the raw reports
    joined = sent(client, "assess.recruited")
    assert len(joined) == 3 and all("FIRST-OPINION-3" in r.last for r in joined)
    # Their talk prompt (turn 1) shows the opinions with the recruits' own assessments in (874-884).
    talks = [r for r in sent(client, "debate.talk") if r.tag.agent != "specialist_1"]
    assert len(talks) == 3 and all("JOINED-OPINION" in r.last and "FIRST-OPINION-3" in r.last for r in talks)
    moderator = sent(client, "decision.moderator")[0]
    assert moderator.last.count("answer A") == 1 and moderator.last.count("answer B") == 3


def test_a_skipped_recruitment_adds_a_turn_and_no_new_answers_up_to_max_turns() -> None:
    """782-788 and `update_with_discussion` 943-963: `<skip recruitment>` adds one turn to the round
    (`num_turns += 1`) and returns before any re-answer; the code has no bound, medpanel stops at
    `max_turns`. Per turn: talk, choose, message, gap, sift, recruit (skip) = 6; 5 turns:
    1 + 1 + 5 x 6 + 1 = 33."""
    rules = {**SELF_TALK, "gap.assess": GAP, "gap.recruit": {"count": 0, **{f"expert_{i}": "" for i in range(1, 10)}}}
    result, client = run(method("kamac", max_turns=5), Q4, reply(rules))
    assert len(client.requests) == 33 and "discussion.answer" not in steps(result)
    assert result.summary["turns_run"] == 5
    assert any(e.step == "turns.capped" for e in result.events)


def test_a_message_reaches_its_addressee_only_through_a_later_talk_prompt_of_the_same_turn() -> None:
    """`discuss` 984-990 with 560-598: the first turn's talk prompt shows the opinions; later turns
    show `all_comments`, the messages sent to that agent so far in the turn. Two agents;
    specialist_1 writes to specialist_2 in turns 1 and 2: only turn 2's note reaches it."""
    def talk(r: ScriptedRequest) -> dict[str, Any]:
        return {"talk": r.tag.agent == "specialist_1"}

    def message(r: ScriptedRequest) -> dict[str, Any]:
        return {"message": f"NOTE-TURN-{r.tag.turn}"}

    rules = {"debate.talk": talk, "debate.choose": {"experts": [2]}, "debate.message": message}
    _, client = run(method("kamac", initial_agents=2), Q4, reply(rules))
    assert not seen_by(client, "specialist_2", "NOTE-TURN-1")
    (talk2,) = sent(client, "debate.talk", agent="specialist_2", turn=2)
    assert "NOTE-TURN-2" in talk2.last
    assert seen_by(client, "specialist_1", "NOTE-TURN-1")


def test_no_kamac_call_sets_a_reply_cap() -> None:
    """`agent/client.py` sets `max_tokens` only for Claude models; the OpenAI path sends none."""
    _, client = run(method("kamac"), Q4, reply(SELF_TALK))
    assert all("max_tokens" not in r.extra for r in client.requests)


def test_the_moderator_may_choose_any_option_and_a_multi_answer_set_is_a_list() -> None:
    """1309-1322: the moderator replies in free text and `get_status` (1344-1381) reads any letter;
    nothing limits it to the specialists' answers. A multi-answer question: any set of its letters."""
    from .scripted_helpers import QMULTI

    rules = {"assess.initial": {"reasoning": "r", "answer": ["C", "A"]},
             "decision.moderator": {"reasoning": "r", "answer": ["A", "B"]}}
    result, client = run(method("kamac"), QMULTI, reply(rules))
    (moderator,) = sent(client, "decision.moderator")
    assert moderator.model.model_json_schema()["properties"]["answer"]["items"]["enum"] == QMULTI.letters
    assert "answer A,C" in moderator.last
    assert result.answer == ("A", "B") and result.summary["rule"] == "moderator"


def test_at_the_turn_limit_the_moderator_reads_the_comments_the_last_turn_began_with() -> None:
    """`start_discuss` 538-548 and 620-638: each turn starts from `turn_comments[turn_num]`; a turn with
    talk and no gap writes everyone's new answers into `turn_comments[turn_num + 1]` (`consensus`
    1068-1091); at the turn limit the round's result is `turn_comments[turn_num - 1]` after the
    increment (634-637): what the last turn began with. The moderator (1309-1322) reads that (648-657),
    so the third turn's answers never reach it. Initial A; answers after turns 1, 2, 3: B, C, D."""
    def answer(r: ScriptedRequest) -> dict[str, Any]:
        return {"reasoning": f"SAID-AFTER-TURN-{r.tag.turn}", "answer": "BCD"[r.tag.turn - 1]}

    rules = {**SELF_TALK, "discussion.answer": answer}
    result, client = run(method("kamac"), Q4, reply(rules))
    assert steps(result).count("discussion.answer") == 3  # the code asks for them all
    (moderator,) = sent(client, "decision.moderator")
    assert "answer C" in moderator.last and "SAID-AFTER-TURN-2" in moderator.last
    assert "SAID-AFTER-TURN-3" not in moderator.last and "answer D" not in moderator.last
    tally = next(e for e in result.events if e.step == "decision.tally")
    assert tally.data["by_agent"] == {"specialist_1": "C"}


def test_after_a_skipped_recruitment_the_next_turn_begins_from_no_comments() -> None:
    """782-788: `<skip recruitment>` returns before any `turn_comments[turn_num + 1]` is written (and
    `update_with_discussion` 943-948 adds a turn), so turn 2 begins from the empty `turn_comments[1]`
    set up at 538. Turn 2 is silent with no gap: the discussion ends (621-625) with that empty set, and
    the moderator is shown no answers. talk, choose, message, gap, sift, recruit (skip), then talk
    and gap: 1 + 1 + 6 + 2 + 1 = 11 calls."""
    def talk(r: ScriptedRequest) -> dict[str, Any]:
        return {"talk": r.tag.turn == 1}

    def gap(r: ScriptedRequest) -> dict[str, Any]:
        return GAP if r.tag.turn == 1 else {"gap": False, "expert": "", "reason": ""}

    rules = {**SELF_TALK, "debate.talk": talk, "gap.assess": gap,
             "assess.initial": {"reasoning": "FIRST-OPINION", "answer": "B"},
             "gap.recruit": {"count": 0, **{f"expert_{i}": "" for i in range(1, 10)}},
             "decision.moderator": {"reasoning": "r", "answer": "D"}}
    result, client = run(method("kamac"), Q4, reply(rules))
    assert len(client.requests) == 11
    (moderator,) = sent(client, "decision.moderator")
    assert "(none)" in moderator.last and "FIRST-OPINION" not in moderator.last
    assert result.answer == ("D",) and result.summary["rule"] == "moderator_without_answers"


def test_the_gap_assistant_keeps_one_history_and_reads_every_specialists_reply() -> None:
    """`DiscussionPanel.__init__` 507-513 makes one assistant per question, and `Agent.temp_responses`
    appends every prompt and reply to its history (`agent/client.py` 662-667, 858), so the second
    sifting call carries the first. Its prompt lists `round_gap[turn_num]` (752-754): every
    specialist's gap reply, a "no" included. Two specialists; specialist_1 reports a gap in turns 1
    and 2 (both recruitments skipped), specialist_2 none."""
    def gap(r: ScriptedRequest) -> dict[str, Any]:
        if r.tag.agent == "specialist_1":
            return {**GAP, "reason": f"GAP-OF-TURN-{r.tag.turn}"}
        return {"gap": False, "expert": "", "reason": ""}

    def sift(r: ScriptedRequest) -> dict[str, Any]:
        return {"recommendations": f"SIFTED-IN-TURN-{r.tag.turn}"}

    rules = {**SELF_TALK, "gap.assess": gap, "gap.summary": sift,
             "gap.recruit": {"count": 0, **{f"expert_{i}": "" for i in range(1, 9)}}}
    _, client = run(method("kamac", initial_agents=2, max_turns=4), Q4, reply(rules))
    first, second = sent(client, "gap.summary")[:2]
    assert first.tag.agent == second.tag.agent == "assistant"
    assert "specialist_2" in first.last and "no gap" in first.last
    history = json.dumps(second.messages)
    assert "GAP-OF-TURN-1" in history and "SIFTED-IN-TURN-1" in history and "GAP-OF-TURN-2" in second.last


def test_each_turn_records_how_many_talked_once() -> None:
    rules = {"debate.talk": lambda r: {"talk": r.tag.agent == "specialist_2"}, "debate.choose": {"experts": [1]},
             "debate.message": {"message": "m"}}
    result, _ = run(method("kamac", initial_agents=3), Q4, reply(rules))
    notes = [e for e in result.events if e.step == "debate.turn"]
    assert [(e.turn, e.data["talked"]) for e in notes] == [(1, 1), (2, 1), (3, 1)]
