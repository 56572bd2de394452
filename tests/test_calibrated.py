"""The complexity-calibrated backbone: triage routes to solo, small group or multi-group."""

from __future__ import annotations

from typing import Any

from medpanel.agents.scripted import ScriptedRequest
from medpanel.agents.types import Condition

from .scripted_helpers import Q4, run


def responder(level: str | None, answers: dict[str, str] | None = None) -> Any:
    team = iter(["Cardiologist", "Pulmonologist", "Nephrologist", "Neurologist"] * 4)

    def respond(r: ScriptedRequest) -> Any:
        if r.tag.role == "triage":
            return {"level": level, "reason": "x"} if level else "garbage"
        if r.tag.role == "challenger":
            return {"material_weakness": False, "gap_type": "none", "challenge": ""}
        if r.tag.step.startswith("select_specialists"):
            return {"specialists": [{"role": next(team), "expertise": "e"}, {"role": next(team), "expertise": "e"}]}
        letter = (answers or {}).get(r.tag.agent, "A")
        return {"reasoning": "r", "answer": letter}

    return respond


def cal(**flags: Any) -> Condition:
    return Condition(slug="c1", pipeline="calibrated", flags={"c": 1, **flags},
                     settings={"rounds": 1, "turns_per_round": 2})


def test_basic_goes_solo_with_a_light_challenger() -> None:
    result, client = run(cal(), Q4, responder("basic"))
    route = next(e for e in result.events if e.step == "route")
    assert route.data == {"level": "basic", "route": "solo", "challenger_depth": "light", "triage_valid": True}
    assert {e.role for e in result.events if e.kind == "call"} == {"triage", "generalist", "challenger"}
    challenger = next(r for r in client.requests if r.tag.role == "challenger")
    assert "Review depth: light" in challenger.system
    assert result.answer == ("A",) and result.summary["route"] == "solo"


def test_intermediate_is_one_small_panel_with_standard_depth() -> None:
    result, client = run(cal(), Q4, responder("intermediate"))
    assert sum(1 for r in client.requests if r.tag.step == "select_specialists") == 1
    assert {e.agent for e in result.events if e.role == "specialist"} == {"cardiologist", "pulmonologist"}
    challenger = next(r for r in client.requests if r.tag.role == "challenger")
    assert "Review depth" not in challenger.system
    assert result.summary["route"] == "small group"


def test_advanced_runs_groups_and_votes_across_them() -> None:
    answers = {"cardiologist": "A", "pulmonologist": "B", "nephrologist": "B", "neurologist": "B"}
    result, client = run(cal(), Q4, responder("advanced", answers))
    assert sum(1 for r in client.requests if r.tag.step == "select_specialists") == 2
    final = next(e for e in result.events if e.step == "final_groups")
    assert final.data["counts"] == {"A": 1, "B": 3} and result.answer == ("B",)
    deep = next(r for r in client.requests if r.tag.role == "challenger")
    assert "Review depth: deep" in deep.system
    assert result.summary["groups"] == 2 and result.summary["route"] == "multi-group"


def test_invalid_triage_routes_to_intermediate_and_is_recorded() -> None:
    result, _ = run(cal(), Q4, responder(None))
    route = next(e for e in result.events if e.step == "route")
    assert route.data["level"] == "intermediate" and route.data["triage_valid"] is False
