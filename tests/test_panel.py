"""The MDT panel's logic with scripted replies: selection, turns, Challenger, recruitment, vote."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import Condition

from .scripted_helpers import Q4, cond, run

TEAM = {"specialists": [{"role": "Cardiologist", "expertise": "heart"},
                        {"role": "Pulmonologist", "expertise": "lungs"}]}
NEW = [{"role": f"Specialist{i}", "expertise": "x"} for i in range(1, 5)]


def panel(flags: dict[str, int], **settings: Any) -> Condition:
    c = cond("panel", **flags)
    return c.model_copy(update={"settings": {"rounds": 1, "turns_per_round": 3, **settings}})


def script(answers: Callable[[ScriptedRequest], str] | None = None, weakness: bool = True, need: bool = True,
           proposals: list[dict[str, str]] | None = None, tie: str = "B") -> Callable[[ScriptedRequest], Any]:
    def responder(r: ScriptedRequest) -> Any:
        if r.tag.step.startswith("select_specialists"):
            return TEAM
        if r.tag.role == "challenger":
            return {"material_weakness": weakness, "gap_type": "missing_expertise" if weakness else "none",
                    "challenge": "CHALLENGE-TEXT: renal function was ignored." if weakness else ""}
        if r.tag.step.startswith("recruit_check"):
            return {"needed": need, "specialty": "Nephrologist", "reason": "kidney"}
        if r.tag.step.startswith("recruit"):
            return {"specialists": proposals if proposals is not None else NEW}
        if r.tag.step.startswith("tie_break"):
            return {"reasoning": "tie", "answer": tie}
        letter = answers(r) if answers else "A"
        return {"reasoning": f"{r.tag.agent} reasons", "answer": letter}

    return responder


def calls(result: Any) -> list[tuple[str, str, int]]:
    return [(e.role, e.step, e.turn) for e in result.events if e.kind == "call"]


def test_specialists_are_selected_from_the_question() -> None:
    result, client = run(panel({"c": 0, "r": 0}, turns_per_round=1), Q4, script())
    assert client.requests[0].tag.step == "select_specialists"
    assert "chest pain" in client.requests[0].last
    agents = {e.agent for e in result.events if e.role == "specialist"}
    assert agents == {"cardiologist", "pulmonologist"}
    assert result.summary["initial_panel"] == ["Cardiologist", "Pulmonologist"]


def test_duplicate_or_invalid_selection_falls_back_and_is_recorded() -> None:
    def responder(r: ScriptedRequest) -> Any:
        if r.tag.step.startswith("select_specialists"):
            return {"specialists": [{"role": "Cardiologist", "expertise": "a"},
                                    {"role": "cardiologists", "expertise": "b"}]}
        return {"reasoning": "r", "answer": "A"}

    result, _ = run(panel({"c": 0, "r": 0}, turns_per_round=1), Q4, responder)
    assert len(result.summary["initial_panel"]) == 2
    assert result.summary["initial_panel"][0] == "Cardiologist"
    assert any(e.step == "fallback_team" for e in result.events)


def test_rounds_and_turns_are_counted() -> None:
    result, _ = run(panel({"c": 0, "r": 0}, rounds=2, turns_per_round=2), Q4, script())
    turns = [(e.round, e.turn) for e in result.events if e.step == "turn"]
    assert turns == [(1, 1), (1, 1), (1, 2), (1, 2), (2, 1), (2, 1), (2, 2), (2, 2)]
    # fixed panel: selection + 4 turns x 2 agents, nothing else
    assert result.calls == 1 + 8


def test_challenger_critique_enters_history_before_recruitment() -> None:
    result, client = run(panel({"c": 1, "r": 1}, turns_per_round=2), Q4, script(need=False))
    order = [s for _, s, _ in calls(result)]
    # after turn 1: critique, then every agent's recruitment check; no critique after the last turn
    assert order == ["select_specialists", "turn", "turn", "critique", "recruit_check", "recruit_check",
                     "turn", "turn"]
    checks = [r for r in client.requests if r.tag.step == "recruit_check"]
    assert all("CHALLENGE-TEXT" in r.last for r in checks)  # Challenger-informed
    second_turn = [r for r in client.requests if r.tag.step == "turn"][2:]
    assert all("CHALLENGE-TEXT" in r.last for r in second_turn)  # appended to each agent's history
    note = next(e for e in result.events if e.step == "recruitment")
    assert note.data["trigger"] == "challenger"


def test_self_triggered_recruitment_asks_without_a_critique() -> None:
    result, client = run(panel({"c": 0, "r": 1}, turns_per_round=2), Q4, script(need=False))
    assert [s for _, s, _ in calls(result)] == ["select_specialists", "turn", "turn", "recruit_check",
                                                "recruit_check", "turn", "turn"]
    assert not any("CHALLENGE-TEXT" in r.last for r in client.requests)
    assert next(e for e in result.events if e.step == "recruitment").data["trigger"] == "self"


def test_recruitment_limits_two_per_turn_five_in_total() -> None:
    result, _ = run(panel({"c": 1, "r": 1}, turns_per_round=4, max_recruit_total=5), Q4, script())
    notes = [e.data["recruited"] for e in result.events if e.step == "recruitment"]
    assert [len(n) for n in notes] == [2, 1, 0]  # 2 + 2 start, cap 5; the third check cannot add
    assert result.summary["final_panel_size"] == 5 and result.summary["recruited"] == 3


def test_recruitment_total_cap_of_three() -> None:
    result, _ = run(panel({"c": 1, "r": 1}, turns_per_round=4, max_panel=10), Q4, script())
    assert result.summary["recruited"] == 3 and result.summary["final_panel_size"] == 5


def test_recruiter_duplicates_are_dropped() -> None:
    dupes = [{"role": "cardiologist", "expertise": "x"}, {"role": "Nephrologist", "expertise": "y"},
             {"role": "Nephrologists", "expertise": "z"}]
    result, _ = run(panel({"c": 0, "r": 1}, turns_per_round=2), Q4, script(proposals=dupes))
    assert result.summary["recruited_roles"] == ["Nephrologist"]


def test_recruited_agent_receives_trajectory() -> None:
    _, client = run(panel({"c": 1, "r": 1}, turns_per_round=2, max_recruit_per_turn=1), Q4, script())
    recruited = [r for r in client.requests if r.tag.agent == "specialist1"]
    assert recruited, "the recruit never spoke"
    first = recruited[0].messages
    text = "\n".join(str(m["content"]) for m in first)
    assert "chest pain" in text and "cardiologist reasons" in text and "CHALLENGE-TEXT" in text


def test_no_recruitment_when_nobody_flags_a_need() -> None:
    result, client = run(panel({"c": 1, "r": 1}, turns_per_round=3), Q4, script(need=False))
    assert result.summary["recruited"] == 0
    assert not any(r.tag.step == "recruit" for r in client.requests)


def test_majority_vote() -> None:
    votes = {"cardiologist": "A", "pulmonologist": "B", "specialist1": "A"}
    result, _ = run(panel({"c": 0, "r": 1}, turns_per_round=2, max_recruit_per_turn=1), Q4,
                    script(answers=lambda r: votes.get(r.tag.agent, "C")))
    vote = next(e for e in result.events if e.kind == "vote")
    assert vote.data["rule"] == "majority" and vote.data["counts"] == {"A": 2, "B": 1}
    assert result.answer == ("A",)


def test_tie_goes_to_moderator_among_tied_letters_only() -> None:
    votes = {"cardiologist": "A", "pulmonologist": "C"}
    result, client = run(panel({"c": 0, "r": 0}, turns_per_round=1), Q4,
                         script(answers=lambda r: votes[r.tag.agent], tie="C"))
    tb = next(r for r in client.requests if r.tag.step == "tie_break")
    enum = tb.model.model_json_schema()["properties"]["answer"]["enum"]
    assert enum == ["A", "C"]
    assert result.answer == ("C",)
    assert next(e for e in result.events if e.kind == "vote").data["rule"] == "moderator"


def _tie(card: list[str], pulm: list[str]) -> Any:
    seq = {"cardiologist": iter(card), "pulmonologist": iter(pulm)}
    base = script(answers=lambda r: next(seq[r.tag.agent]))

    def responder(r: ScriptedRequest) -> Any:
        return "not json" if r.tag.step.startswith("tie_break") else base(r)

    result, _ = run(panel({"c": 0, "r": 0}, turns_per_round=3), Q4, responder)
    return result, next(e for e in result.events if e.kind == "vote")


def test_failed_tie_break_falls_back_to_support_over_all_turns() -> None:
    result, vote = _tie(["A", "A", "A"], ["A", "C", "C"])  # final A vs C; support A 4, C 2
    assert vote.data["rule"] == "cumulative support" and result.answer == ("A",)


def test_unresolvable_tie_is_invalid_never_a_default_letter() -> None:
    result, vote = _tie(["A", "C", "A"], ["C", "A", "C"])  # final A vs C; support 3 each
    assert vote.data["rule"] == "unresolved tie" and result.invalid and result.answer == ()


def test_early_agreement_still_produces_the_answer() -> None:
    result, _ = run(panel({"c": 1, "r": 0}, turns_per_round=3, early_stop=True), Q4, script(weakness=False))
    assert result.summary["stopped_early"] is True
    assert result.answer == ("A",) and result.correct and not result.invalid
    assert len([e for e in result.events if e.step == "turn"]) == 2


def test_check_calls_do_not_change_the_discussion() -> None:
    """A self-check that recruits nobody leaves later turns identical to the fixed panel's."""
    _, c1 = run(panel({"c": 0, "r": 0}, turns_per_round=3), Q4, script())
    _, c2 = run(panel({"c": 0, "r": 1}, turns_per_round=3), Q4, script(need=False))
    t1 = [r.messages for r in c1.requests if r.tag.step == "turn"]
    t2 = [r.messages for r in c2.requests if r.tag.step == "turn"]
    assert t1 == t2


def test_self_assessment_asks_once_after_the_first_turn() -> None:
    result, client = run(panel({"c": 0, "r": 1}, turns_per_round=3, self_assessment=True), Q4, script(need=False))
    checks = [r for r in client.requests if r.tag.step == "recruit_check"]
    assert len(checks) == 2 and all(r.tag.turn == 1 for r in checks)
    assert result.summary["self_assessment"] is True and result.summary["recruited"] == 0


def test_placeholder_roles_are_invalid_and_reasked() -> None:
    replies = iter([{"specialists": [{"role": "<role>", "expertise": "<expertise>"}]}, TEAM])

    def responder(r: ScriptedRequest) -> Any:
        if r.tag.step.startswith("select_specialists"):
            return next(replies)
        return {"reasoning": "r", "answer": "A"}

    result, client = run(panel({"c": 0, "r": 0}, turns_per_round=1), Q4, responder)
    assert [r.tag.step for r in client.requests[:2]] == ["select_specialists", "select_specialists:reask"]
    assert "not the placeholder" in client.requests[1].last
    assert result.summary["initial_panel"] == ["Cardiologist", "Pulmonologist"]
