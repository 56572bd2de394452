"""Each panel step driven alone, with scripted replies: what it sends, what it posts, what it returns.

A step is given a panel state (two seated specialists who have taken one turn) and nothing of the
pipeline. Who sees what is traced with unique tokens: a reply's token must reach later requests
exactly when the step shares it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.model.structured import answer_model
from medpanel.methods.panel.channels.knowledge import KnowledgeChannel
from medpanel.methods.panel.roles.challenger import Critique
from medpanel.methods.panel.roles.selector import Specialist
from medpanel.methods.panel.settings import PanelSettings
from medpanel.methods.panel.state import Group, PanelState, Post
from medpanel.methods.panel.steps import (
    add_member,
    between_brief,
    coordinate,
    critique,
    recruit,
    run_turn,
    upfront_brief,
)
from medpanel.retrieval.corpus import ingest

from .scripted_helpers import Q4

TEAM = [Specialist(role="Cardiologist", expertise="heart"), Specialist(role="Pulmonologist", expertise="lungs")]
CRIT = "CRIT-7f3a-TOKEN"
BRIEF = "BRIEF-91c2-TOKEN"


def responder(weakness: bool = True, gap: str = "insufficient_evidence", need: bool = True) -> Callable[..., Any]:
    """Positions name their agent and turn; the critique, brief and recruit carry tokens of their own."""

    def respond(r: ScriptedRequest) -> Any:
        step = r.tag.step.split(":")[0]
        if r.tag.role == "challenger":
            return {"material_weakness": weakness, "gap_type": gap if weakness else "none",
                    "challenge": f"{CRIT}: the troponin was never discussed." if weakness else ""}
        if r.tag.role == "knowledge_gate":
            return {"retrieve": True, "knowledge_gap": "first test", "query": "chest pain ECG"}
        if r.tag.role == "curator":
            return {"points": [{"point": f"{BRIEF} fact {i}", "sources": [1]} for i in range(5)]}
        if step == "recruit_check":
            return {"needed": need, "specialty": "Nephrologist", "reason": "kidney"}
        if step == "recruit":
            return {"specialists": [{"role": "Nephrologist", "expertise": "kidneys"}]}
        if step == "auxiliary_assessment":
            return {"reasoning": "ASSESS-TOKEN", "answer": "B"}
        return {"reasoning": f"POS-{r.tag.agent}-T{r.tag.turn}-TOKEN", "answer": "A"}

    return respond


def seated(respond: Callable[..., Any], *, group: Group | None = None, **state: Any) -> tuple[PanelState,
                                                                                              ScriptedChatCompletionClient]:
    """A panel of two that has taken its first turn; the client's requests start after it."""
    client = ScriptedChatCompletionClient(respond)
    session = QuestionSession(spec=ModelSpec(backend="scripted", cache="off"), inner=client)
    settings = state.pop("settings", PanelSettings())
    panel = PanelState(question=Q4, session=session, settings=settings, group=group, **state)
    for spec in TEAM:
        add_member(panel, spec, turn=1, recruited=False)
    asyncio.run(run_turn(panel, answer_type(), rnd=1, turn=1, index=1))
    client.requests.clear()
    return panel, client


def answer_type() -> Any:
    return answer_model(Q4.letters, multi=False)


def next_turn(state: PanelState, client: ScriptedChatCompletionClient) -> list[ScriptedRequest]:
    """The specialists' requests of turn 2."""
    before = len(client.requests)
    asyncio.run(run_turn(state, answer_type(), rnd=1, turn=2, index=2))
    return [r for r in client.requests[before:] if r.tag.step == "turn"]


def shown(r: ScriptedRequest) -> str:
    return "\n".join(str(m["content"]) for m in r.messages)


@pytest.fixture()
def corpus(tmp_path: Path) -> str:
    docs = [{"id": "d1", "title": "ECG first", "content": "In acute chest pain an ECG is the first test."},
            {"id": "d2", "title": "Chest pain", "content": "Chest pain evaluation starts with an ECG."}]
    f = tmp_path / "docs.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    ingest([f], "stepcorpus", progress=False)
    return "stepcorpus"


# critique (the Challenger, `c`)

def test_critique_reviews_the_whole_trace_and_posts_a_material_weakness() -> None:
    state, client = seated(responder())
    state.posts.insert(0, Post("evidence_curator", "UPFRONT-BRIEF-TOKEN", 0, kind="brief"))
    found = asyncio.run(critique(state, rnd=1, turn=1, index=1))
    [request] = client.requests
    assert (request.tag.role, request.tag.step, request.tag.turn) == ("challenger", "critique", 1)
    # the accumulated trace: both positions of turn 1 and the earlier brief
    assert all(t in request.last for t in ("POS-cardiologist-T1-TOKEN", "POS-pulmonologist-T1-TOKEN",
                                           "UPFRONT-BRIEF-TOKEN"))
    assert isinstance(found, Critique) and found.material_weakness and CRIT in found.challenge
    assert state.weaknesses == 1
    assert state.posts[-1].kind == "critique" and CRIT in state.posts[-1].text
    turn2 = next_turn(state, client)
    assert len(turn2) == 2 and all(CRIT in r.last for r in turn2)  # every specialist hears it next turn


def test_critique_without_a_weakness_posts_nothing() -> None:
    state, client = seated(responder(weakness=False))
    posts = list(state.posts)
    found = asyncio.run(critique(state, rnd=1, turn=1, index=1))
    assert found is not None and not found.material_weakness
    assert state.posts == posts and state.weaknesses == 0
    assert not any("Challenge" in r.last for r in next_turn(state, client))


def test_critique_of_a_group_names_the_group() -> None:
    state, client = seated(responder(), group=Group(index=2, of=3))
    asyncio.run(critique(state, rnd=1, turn=1, index=1))
    assert Group(index=2, of=3).note() in client.requests[0].last


# brief (the knowledge channel, `k`)

def test_between_brief_sees_the_critique_unless_blind_and_is_posted(corpus: str) -> None:
    settings = PanelSettings(corpus=corpus, k=2)
    for blind in (False, True):
        state, client = seated(responder(), settings=settings)
        found = asyncio.run(critique(state, rnd=1, turn=1, index=1))
        channel = KnowledgeChannel(state.session, Q4, settings)
        asyncio.run(between_brief(state, channel, found, blind=blind, rnd=1, turn=1, index=1))
        gate = next(r for r in client.requests if r.tag.role == "knowledge_gate")
        assert "POS-cardiologist-T1-TOKEN" in gate.last  # the turn's positions
        assert (CRIT in gate.last) is not blind
        assert [r.tag.role for r in client.requests] == ["challenger", "knowledge_gate", "curator"]
        assert state.posts[-1].kind == "brief" and BRIEF in state.posts[-1].text
        turn2 = next_turn(state, client)
        assert all(BRIEF in r.last for r in turn2)
        assert state.posts[-1].turn == 2  # the brief was shared once, before turn 2's posts
        assert channel.results[0].received_by == ["cardiologist", "pulmonologist"]


def test_between_brief_never_reaches_an_auxiliary_recruit(corpus: str) -> None:
    settings = PanelSettings(corpus=corpus, k=2)
    state, client = seated(responder(), settings=settings, independent=True)
    aux = add_member(state, Specialist(role="Nephrologist", expertise="kidneys"), turn=1, recruited=True)
    aux.auxiliary = True
    channel = KnowledgeChannel(state.session, Q4, settings)
    asyncio.run(between_brief(state, channel, None, blind=True, rnd=1, turn=1, index=1))
    turn2 = next_turn(state, client)
    by_agent = {r.tag.agent: r for r in turn2}
    assert BRIEF in by_agent["cardiologist"].last and BRIEF not in shown(by_agent["nephrologist"])
    assert channel.results[0].received_by == ["cardiologist", "pulmonologist"]


def test_upfront_brief_retrieves_with_the_question_before_the_first_turn(corpus: str) -> None:
    settings = PanelSettings(corpus=corpus, k=2)
    client = ScriptedChatCompletionClient(responder())
    state = PanelState(question=Q4, session=QuestionSession(spec=ModelSpec(backend="scripted", cache="off"),
                                                            inner=client), settings=settings)
    for spec in TEAM:
        add_member(state, spec, turn=1, recruited=False)
    channel = KnowledgeChannel(state.session, Q4, settings)
    asyncio.run(upfront_brief(state, channel))
    assert [r.tag.role for r in client.requests] == ["curator"]  # no gate: the question is the query
    assert channel.queries == [Q4.text]
    assert state.posts[0].turn == 0 and BRIEF in state.posts[0].text
    asyncio.run(run_turn(state, answer_type(), rnd=1, turn=1, index=1))
    first = [r for r in client.requests if r.tag.step == "turn"]
    assert len(first) == 2 and all(BRIEF in r.last and "chest pain" in r.last for r in first)


def test_upfront_brief_shared_by_the_groups_is_not_retrieved_again(corpus: str) -> None:
    settings = PanelSettings(corpus=corpus, k=2)
    first, _ = seated(responder(), settings=settings)
    retrieved = asyncio.run(KnowledgeChannel(first.session, Q4, settings).upfront())
    assert retrieved is not None
    state, client = seated(responder(), settings=settings,
                           group=Group(index=2, of=2, upfront=retrieved, shared_upfront=True))
    channel = KnowledgeChannel(state.session, Q4, settings)
    asyncio.run(upfront_brief(state, channel))
    assert client.requests == [] and channel.queries == []  # no new search, no new curator call
    assert channel.results == [retrieved] and state.posts[-1].brief is retrieved


# recruitment (`r`)

def test_recruitment_after_a_critique_quotes_it_and_the_recruit_hears_the_trajectory() -> None:
    state, client = seated(responder())
    found = asyncio.run(critique(state, rnd=1, turn=1, index=1))
    added = asyncio.run(recruit(state, found, rnd=1, turn=1, index=1))
    assert added == ["Nephrologist"]
    checks = [r for r in client.requests if r.tag.step == "recruit_check"]
    assert len(checks) == 2 and all(CRIT in r.last for r in checks)
    note = next(e for e in state.session.events if e.step == "recruitment")
    assert note.data["trigger"] == "challenger" and note.data["recruited"] == ["Nephrologist"]
    recruit_turn = next(r for r in next_turn(state, client) if r.tag.agent == "nephrologist")
    seen = shown(recruit_turn)
    assert "POS-cardiologist-T1-TOKEN" in seen and CRIT in seen  # the trajectory, critique included


def test_self_triggered_recruitment_sends_no_critique_and_a_no_adds_nobody() -> None:
    state, client = seated(responder(need=False))
    assert asyncio.run(recruit(state, None, rnd=1, turn=1, index=1)) == []
    assert [r.tag.step for r in client.requests] == ["recruit_check", "recruit_check"]
    assert not any("The Challenger raised" in r.last for r in client.requests)
    assert next(e for e in state.session.events if e.step == "recruitment").data["trigger"] == "self"
    assert len(state.members) == 2


def test_recruitment_with_no_room_asks_nobody() -> None:
    state, client = seated(responder(), settings=PanelSettings(max_panel=2))
    assert asyncio.run(recruit(state, None, rnd=1, turn=1, index=1)) == []
    assert client.requests == []
    assert next(e for e in state.session.events if e.step == "recruitment").data["room"] == 0


def test_independent_recruit_assesses_the_gap_without_the_discussion() -> None:
    state, client = seated(responder(), independent=True, assessors=True)
    found = asyncio.run(critique(state, rnd=1, turn=1, index=1))
    asyncio.run(recruit(state, found, rnd=1, turn=1, index=1))
    assess = next(r for r in client.requests if r.tag.agent == "nephrologist")
    assert CRIT in shown(assess) and "POS-cardiologist-T1-TOKEN" not in shown(assess)
    [member] = [m for m in state.members if m.recruited]
    assert member.assessor and member.assessment is not None and member.assessment["answer"] == ["B"]
    assert [r.tag.agent for r in next_turn(state, client)] == ["cardiologist", "pulmonologist"]


# coordination (the routed controller)

@pytest.mark.parametrize(("gap", "route"), [("insufficient_evidence", "retrieve"), ("missing_expertise", "recruit"),
                                            ("logical_inconsistency", "critique_round"),
                                            ("missing_differential", "critique_round"), ("none", "none")])
def test_coordination_routes_the_gap_and_records_it(gap: str, route: str) -> None:
    state, client = seated(responder(), routed=True)
    found = Critique.model_validate({"material_weakness": gap != "none", "gap_type": gap,
                                     "challenge": f"FOCUS-{gap}-TOKEN"})
    assert coordinate(state, found, rnd=1, turn=1) == route
    assert client.requests == []  # the controller decides; it asks no model
    note = next(e for e in state.session.events if e.step == "route")
    assert note.data == {"gap_type": gap, "route": route} and state.routes == [route]
    turn2 = next_turn(state, client)
    # a critique round makes the next turn answer the challenge point by point; no other route does
    assert all((f"FOCUS-{gap}-TOKEN" in r.last) is (route == "critique_round") for r in turn2)


def test_coordination_without_a_critique_routes_nowhere() -> None:
    state, _ = seated(responder(), routed=True)
    assert coordinate(state, None, rnd=1, turn=1) == "none"
    assert next(e for e in state.session.events if e.step == "route").data == {"gap_type": None, "route": "none"}
