"""The complexity-calibrated backbone: triage routes to solo, small group or multi-group."""

from __future__ import annotations

from typing import Any

from medpanel.agents.model.scripted import ScriptedRequest
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


def test_groups_are_distinct_panels_that_never_replay_each_other(tmp_path) -> None:
    """With the run cache on, group 2 used to send group 1's very requests and get its replies."""
    from medpanel.agents.model.cache import ResponseCache

    def respond(r: ScriptedRequest) -> Any:
        if r.tag.role == "triage":
            return {"level": "advanced", "reason": "x"}
        if r.tag.role == "challenger":
            return {"material_weakness": False, "gap_type": "none", "challenge": ""}
        if r.tag.step.startswith("select_specialists"):
            # a selector that honours what it is told: roles already seated elsewhere are not chosen again
            seated = "Cardiologist" in r.last.split("already seated in earlier groups:")[-1]
            roles = ["Nephrologist", "Neurologist"] if seated else ["Cardiologist", "Pulmonologist"]
            return {"specialists": [{"role": role, "expertise": "e"} for role in roles]}
        return {"reasoning": f"{r.tag.agent} reasons", "answer": "A"}

    cache = ResponseCache(tmp_path / "cache")
    result, client = run(cal(), Q4, respond, cache=cache)
    cache.close()
    start = next(i for i, e in enumerate(result.events) if e.step == "group_start" and e.agent == "group_2")
    second = [e for e in result.events[start:] if e.kind == "call"]
    assert second and not any(e.cache_hit for e in second)  # group 2 sent its own requests
    assert result.summary["group_panels"] == [["Cardiologist", "Pulmonologist"], ["Nephrologist", "Neurologist"]]
    select = [r for r in client.requests if r.tag.step == "select_specialists"]
    assert "Discussion group 2 of 2" in select[1].last and "Cardiologist, Pulmonologist" in select[1].last
    group2 = [r for r in client.requests
              if r.tag.role == "specialist" and r.tag.agent in ("nephrologist", "neurologist")]
    assert group2 and all("Discussion group 2 of 2" in r.system for r in group2)
    critiques = [r for r in client.requests if r.tag.role == "challenger"]
    assert ["Discussion group 1 of 2" in r.last for r in critiques] == [True, False]
    assert "Discussion group 2 of 2" in critiques[1].last
    final = next(e for e in result.events if e.step == "final_groups")
    assert set(final.data["votes"]) == {"g1:cardiologist", "g1:pulmonologist", "g2:nephrologist", "g2:neurologist"}


def test_a_group_never_reseats_a_role_even_from_the_fallback_team() -> None:
    def respond(r: ScriptedRequest) -> Any:
        if r.tag.role == "triage":
            return {"level": "advanced", "reason": "x"}
        if r.tag.role == "challenger":
            return {"material_weakness": False, "gap_type": "none", "challenge": ""}
        if r.tag.step.startswith("select_specialists"):
            return "no json"  # invalid twice: both groups fall back
        return {"reasoning": "r", "answer": "A"}

    result, _ = run(cal(), Q4, respond)
    first, second = result.summary["group_panels"]
    assert len(first) == len(second) == 2 and not set(first) & set(second)


def test_an_upfront_brief_is_retrieved_once_and_shown_to_every_group(tmp_path) -> None:
    import json

    from medpanel.retrieval.corpus import ingest

    f = tmp_path / "docs.jsonl"
    f.write_text(json.dumps({"id": "d1", "title": "ECG", "content": "In chest pain an ECG comes first."}) + "\n")
    ingest([f], "calcorpus", progress=False)
    base = responder("advanced")

    def respond(r: ScriptedRequest) -> Any:
        if r.tag.role == "curator":
            return {"points": [{"point": f"UPFRONT-TOKEN {i}", "sources": [1]} for i in range(5)]}
        return base(r)

    condition = Condition(slug="upfront", pipeline="calibrated", flags={"variant": "upfront"},
                          settings={"rounds": 1, "turns_per_round": 2, "corpus": "calcorpus", "k": 1})
    result, client = run(condition, Q4, respond)
    assert [r.tag.role for r in client.requests].count("curator") == 1
    first_turns = [r for r in client.requests if r.tag.step == "turn" and r.tag.turn == 1]
    assert len(first_turns) == 4 and all("UPFRONT-TOKEN" in r.last for r in first_turns)
    assert result.summary["retrievals"] == 1 and result.summary["gate_fired"] is True
