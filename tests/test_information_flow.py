"""Who sees what, traced with unique tokens planted in scripted replies: the whole history reaches
every later request (context windows), and the Challenger reviews the accumulated trace."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from autogen_core.models import AssistantMessage, UserMessage

from medpanel.agents.model.context import Part, Trim, WindowedContext
from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.types import Condition
from medpanel.retrieval.corpus import ingest

from .scripted_helpers import Q4, cond, run

DOCS = [{"id": f"d{i}", "title": f"Chest pain {i}", "content": f"In chest pain an ECG comes first ({i})."}
        for i in range(4)]


@pytest.fixture()
def corpus(tmp_path: Path) -> str:
    f = tmp_path / "docs.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in DOCS), encoding="utf-8")
    ingest([f], "flow", progress=False)
    return "flow"


def script(long: int = 0) -> Any:
    """Every critique and brief carries a token naming its turn; positions name agent and turn."""

    def respond(r: ScriptedRequest) -> Any:
        step = r.tag.step.split(":")[0]
        if step == "select_specialists":
            return {"specialists": [{"role": "Cardiologist", "expertise": "heart"},
                                    {"role": "Pulmonologist", "expertise": "lungs"}]}
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "insufficient_evidence",
                    "challenge": f"CRIT-R{r.tag.round}T{r.tag.turn}-TOKEN: the troponin was never discussed."}
        if r.tag.role == "knowledge_gate":
            return {"retrieve": True, "knowledge_gap": "first test", "query": "chest pain ECG"}
        if r.tag.role == "curator":
            token = f"BRIEF-R{r.tag.round}T{r.tag.turn}-TOKEN"
            return {"points": [{"point": f"{token} fact {i}", "sources": [1]} for i in range(5)]}
        return {"reasoning": f"POS-{r.tag.agent}-R{r.tag.round}T{r.tag.turn}-TOKEN " + "x" * long, "answer": "A"}

    return respond


def panel_3x3(corpus: str, **flags: int) -> Condition:
    c = cond("panel", **flags)
    return c.model_copy(update={"settings": {"rounds": 3, "turns_per_round": 3, "corpus": corpus, "k": 2}})


def sent(r: ScriptedRequest) -> str:
    return "\n".join(str(m["content"]) for m in r.messages)


def test_round_three_still_carries_turn_ones_critique_and_brief(corpus: str) -> None:
    result, client = run(panel_3x3(corpus, c=1, r=0, k=1), Q4, script())
    round3 = [r for r in client.requests if r.tag.step == "turn" and r.tag.round == 3]
    assert len(round3) == 6  # 2 specialists x 3 turns
    for r in round3:
        text = sent(r)
        assert "CRIT-R1T1-TOKEN" in text and "BRIEF-R1T1-TOKEN" in text, (r.tag.agent, r.tag.turn)
        assert "POS-cardiologist-R1T1-TOKEN" in text  # turn 1's positions too: nothing was dropped
    assert not any(e.step == "context_trimmed" for e in result.events)


def test_the_challenger_reviews_the_accumulated_trace_with_its_own_critiques(corpus: str) -> None:
    _, client = run(panel_3x3(corpus, c=1, r=0, k=0), Q4, script())
    critiques = [r for r in client.requests if r.tag.role == "challenger"]
    second = next(r for r in critiques if r.tag.turn == 2)
    text = sent(second)
    assert "POS-cardiologist-R1T1-TOKEN" in text and "POS-pulmonologist-R1T1-TOKEN" in text  # turn 1's positions
    assert "CRIT-R1T1-TOKEN" in text  # its own earlier critique, so it does not repeat itself
    assert "POS-cardiologist-R1T2-TOKEN" in text
    last = critiques[-1]  # after round 3, turn 2: every earlier critique is in its request
    earlier = [(r.tag.round, r.tag.turn) for r in critiques[:-1]]
    assert len(earlier) == 7 and all(f"CRIT-R{a}T{b}-TOKEN" in sent(last) for a, b in earlier)


def test_a_declared_window_drops_old_positions_first_and_never_a_critique_or_brief(corpus: str) -> None:
    # A long-winded model on a backend with a 1,024-token window: the history must be cut.
    result, client = run(panel_3x3(corpus, c=1, r=0, k=1), Q4, script(long=1500), context_window=1024,
                         max_tokens=64)
    trims = [e for e in result.events if e.step == "context_trimmed"]
    assert trims, "nothing was trimmed"
    dropped = [d for e in trims for d in e.data["dropped"]]
    assert all("position" in d or "own" in d for d in dropped)
    first = trims[0].data["newly_dropped"]
    assert first and ("turn 1" in first[0] or "(round 1, turn 1)" in first[0])  # the oldest go first
    last_turn = [r for r in client.requests if r.tag.step == "turn"][-1]
    text = sent(last_turn)
    turns = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3)][:8]  # every intervention before the last turn
    assert all(f"CRIT-R{a}T{b}-TOKEN" in text and f"BRIEF-R{a}T{b}-TOKEN" in text for a, b in turns)
    assert "chest pain" in text  # the question stays
    assert "POS-cardiologist-R1T1-TOKEN" not in text and "omitted to fit the model's context window" in text


# -- the policy on its own ----------------------------------------------------------------------


def test_window_policy_keeps_question_critique_brief_and_drops_oldest_positions() -> None:
    trims: list[Trim] = []
    ctx = WindowedContext(window=120, reserve=20, on_trim=trims.append, count=lambda t: len(t) // 4 + 1)
    pos1, pos2, pos3 = "[a] POS1 " + "p" * 120, "[b] POS2 " + "p" * 120, "[c] POS3 " + "p" * 40

    async def build() -> None:
        await ctx.add_message(UserMessage(content="QUESTION: chest pain?", source="m"))
        ctx.expect([], reply="own reply t1")
        await ctx.add_message(AssistantMessage(content="OWN1 " + "o" * 100, source="x"))
        ctx.expect([Part(pos1, "turn 1 position of a"), Part(pos2, "turn 1 position of b")])
        shared = f"{pos1}\n\n{pos2}\n\n[challenger] CRITIQUE-1\n\nBRIEF-1"
        await ctx.add_message(UserMessage(content=shared, source="m"))
        await ctx.add_message(AssistantMessage(content="OWN2 short", source="x"))
        ctx.expect([Part(pos3, "turn 2 position of c")])
        await ctx.add_message(UserMessage(content=f"{pos3}\n\nRound 1, turn 3.", source="m"))

    asyncio.run(build())
    view = asyncio.run(ctx.get_messages())
    text = "\n".join(str(m.content) for m in view)
    assert "QUESTION" in text and "CRITIQUE-1" in text and "BRIEF-1" in text and "Round 1, turn 3." in text
    assert "OWN1" not in text and "POS1" not in text  # the oldest positions went first
    assert "POS3" in text  # the newest stayed: dropping stopped as soon as it fitted
    assert [type(m) for m in view] == [UserMessage, AssistantMessage, UserMessage, AssistantMessage, UserMessage]
    assert len(trims) == 1 and trims[0].dropped[:2] == ["own reply t1", "turn 1 position of a"]
    assert trims[0].tokens_after <= trims[0].budget == 100
    # the full history is kept: a later, larger window would show everything again
    assert "POS1" in "\n".join(str(m.content) for m in ctx.full())
    # the same view again records nothing new
    asyncio.run(ctx.get_messages())
    assert len(trims) == 1


def test_no_declared_window_means_the_whole_history() -> None:
    ctx = WindowedContext(window=None)
    for i in range(40):
        asyncio.run(ctx.add_message(UserMessage(content="m" * 1000 + str(i), source="s")))
    assert len(asyncio.run(ctx.get_messages())) == 40


def test_only_the_embedded_backend_declares_a_window() -> None:
    assert ModelSpec(backend="local").context_limit == 8192
    assert ModelSpec(backend="openai").context_limit is None
    assert ModelSpec(backend="azure").context_limit is None
    assert ModelSpec(backend="openai", context_window=32768).context_limit == 32768
    assert ModelSpec(backend="local", context_window=4096).context_limit == 4096
