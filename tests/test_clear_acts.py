"""CLEAR's stages come from its acts: transcripts written before CLEAR's roles marked them still read
as that code read them, and a method whose steps are named otherwise gets the same stages from the
same acts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.events import PathwayAnswer, Ruling, Verdict
from medpanel.experiments.analysis.trajectory import trajectory
from medpanel.experiments.run.store.records import TRANSCRIPT_FORMAT, TranscriptRecord

FIXTURES = Path(__file__).parent / "fixtures" / "v2-clear"
STAGES = json.loads((FIXTURES / "stages.json").read_text(encoding="utf-8"))


def _stages(doc: dict[str, Any]) -> dict[str, Any]:
    t = trajectory(doc)
    # Through JSON, as stages.json holds them (tuples become lists).
    return json.loads(json.dumps({"kind": t.kind, "stages": [dataclasses.asdict(s) for s in t.stages]}, default=list))


@pytest.mark.parametrize("name", sorted(STAGES))
def test_a_format_2_clear_transcript_gives_the_stages_its_step_names_gave(name: str) -> None:
    doc = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    assert doc["format_version"] == 2 and all(e["act"] is None for e in doc["events"] if e["kind"] == "call"
                                              and e["role"] in ("candidate", "verifier"))
    assert _stages(doc) == STAGES[name]
    acts = [e.act for e in TranscriptRecord.model_validate(doc).events]
    assert any(isinstance(a, PathwayAnswer) for a in acts)
    assert any(isinstance(a, Verdict) for a in acts) == (name != "online.json")


def test_the_fixture_covers_the_adjudications_acts() -> None:
    """The stored transcripts hold every stage CLEAR's reader builds: pathways, verdicts, a follow-up,
    the guard's ruling; and a panel whose evidence channel is CLEAR stays a debate."""
    kinds = {name: [s["label"] for s in v["stages"]] for name, v in STAGES.items()}
    assert kinds["freetext-clear-default.json"] == ["pathways", "verdict 1", "verdict 2", "final"]
    assert STAGES["panel-clear-channel.json"]["kind"] == "debate"
    before = [i["kind"] for v in STAGES.values() for s in v["stages"] for i in s["before"]]
    assert {"follow_up", "clear_verdict", "guard"} <= set(before), before


def _call(role: str, step: str, act: dict[str, Any] | None, *, answer: str | None = None, **more: Any) -> dict:
    return {"kind": "call", "role": role, "agent": role, "step": step, "act": act,
            "parsed": None if answer is None else {"answer": answer, "reasoning": "r"}, **more}


def test_a_method_with_other_step_names_gets_the_stages_from_its_acts() -> None:
    """A second evidence-adjudicating method names its steps and roles as it likes: marking its
    pathway answers, verdict calls, follow-ups and rulings gives it CLEAR's stages."""
    events = [
        _call("reader", "from_memory", {"type": "pathway_answer", "pathway": "parametric"}, answer="B"),
        _call("reader", "from_textbook", {"type": "pathway_answer", "pathway": "local"}, answer="A"),
        _call("reader", "from_web", {"type": "pathway_answer", "pathway": "dynamic"}, answer="A"),
        _call("judge", "weigh", {"type": "verdict"}, answer="B", round=1),
        {"kind": "note", "role": "search", "agent": "search", "step": "more", "round": 1,
         "act": {"type": "follow_up_search", "purpose": "needs_more_search"}},
        _call("judge", "weigh", {"type": "verdict"}, answer="A", round=2),
        {"kind": "note", "role": "check", "agent": "check", "step": "letters", "round": 2,
         "act": {"type": "ruling", "rule": "format_gate", "outcome": "valid", "intervened": False}},
        {"kind": "decision", "role": "judge", "agent": "judge", "step": "done", "content": "A",
         "data": {"verdicts": [{"round": 1, "answer": ["B"], "route": "needs_more_search"},
                               {"round": 2, "answer": ["A"], "route": "consensus"}]}},
    ]
    doc = {"format_version": TRANSCRIPT_FORMAT, "condition": "mine", "answer": ["A"], "gold": ["A"], "correct": True,
           "question": {"dataset": "d", "qid": "q", "text": "?", "options": {"A": "a", "B": "b"}, "gold": ["A"]},
           "events": events}
    t = trajectory(doc)
    assert t.kind == "clear"
    assert [s.label for s in t.stages] == ["pathways", "verdict 1", "verdict 2", "final"]
    assert {p: c.position for p, c in t.stages[0].cells.items()} == {"parametric": "B", "local": "A", "dynamic": "A"}
    assert t.stages[0].event_index == 0 and t.stages[1].event_index == 3 and t.stages[2].event_index == 5
    assert [i.show() for i in t.stages[2].before] == ["follow_up[needs_more_search]", "clear_verdict[route consensus]"]
    assert t.final.before == []  # a format gate that let the answer pass is no intervention
    rejected = {**events[6], "act": {"type": "ruling", "rule": "format_gate", "outcome": "no option letter"}}
    t = trajectory({**doc, "events": [*events[:6], rejected, events[7]]})
    assert [i.show() for i in t.final.before] == ["format_gate[no option letter]"]


def test_the_acts_carry_their_payload() -> None:
    assert Ruling(rule="guard", outcome="granted").intervened
    assert PathwayAnswer(pathway="local").model_dump() == {"type": "pathway_answer", "pathway": "local"}
    assert Verdict().model_dump() == {"type": "verdict"}
