"""Role agents' calls are made by AutoGen agents lent per call (`agent_pool`): no AutoGen agent is
built per question once the pool is warm, each call still sends its own agent's system message and
history (concurrent agents of one name included), a side question stays out of later requests, and
an agent goes back to the pool however its call ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import UserMessage

from medpanel.agents.model.agent import RoleAgent, _reply
from medpanel.agents.model.agent_pool import AgentPool
from medpanel.agents.model.client import QuestionSession, RecordingClient
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.model.structured import answer_model
from medpanel.agents.pipelines.run import run_question
from medpanel.agents.types import Condition, Question

LETTER = answer_model(["A", "B"], reasoning=False)


def _session(responder: Any = None) -> QuestionSession:
    inner = ScriptedChatCompletionClient(responder or (lambda r: '{"answer": "B"}'))
    return QuestionSession(spec=ModelSpec(backend="scripted", temperature=0.0, seed=1), inner=inner)


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []
    original = AssistantAgent.__init__

    def counted(self: AssistantAgent, name: str, *args: Any, **kwargs: Any) -> None:
        built.append(name)
        original(self, name, *args, **kwargs)

    monkeypatch.setattr(AssistantAgent, "__init__", counted)
    return built


def test_questions_build_no_autogen_agent_once_the_pool_is_warm(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _count_builds(monkeypatch)
    condition = Condition(slug="direct", pipeline="direct")
    questions = [Question(dataset="d", qid=str(i), text=f"Question {i}?", options={"A": "a", "B": "b"}, gold=("B",))
                 for i in range(20)]

    async def go() -> list[Any]:
        spec = ModelSpec(backend="scripted", temperature=0.0, seed=1)
        out = []
        for q in questions:
            inner = ScriptedChatCompletionClient(lambda r: '{"answer": "B"}')
            out.append(await run_question(condition, q, spec, client_factory=lambda s, inner=inner: inner))
        return out

    results = asyncio.run(go())
    assert [r.answer for r in results] == [("B",)] * 20 and all(r.calls == 1 for r in results)
    assert len(built) <= 1, f"{len(built)} AutoGen agents built for 20 questions"


def test_each_call_sends_its_own_agents_system_message_and_history() -> None:
    async def one(name: str, system: str, topic: str, session: QuestionSession) -> None:
        agent = RoleAgent(session, name=name, role="generalist", system_message=system)
        await agent.speak(f"{topic} first?", LETTER, step="one")
        await asyncio.sleep(0)
        await agent.speak(f"{topic} second?", LETTER, step="two")

    sessions = [_session() for _ in range(4)]

    async def go() -> None:
        # Same name and system message on two of them, at the same time: each lent its own agent.
        await asyncio.gather(one("doctor", "You are a doctor.", "heart", sessions[0]),
                             one("doctor", "You are a doctor.", "lung", sessions[1]),
                             one("nurse", "You are a nurse.", "skin", sessions[2]),
                             one("doctor", "You are a surgeon.", "bone", sessions[3]))

    asyncio.run(go())
    systems = ["You are a doctor.", "You are a doctor.", "You are a nurse.", "You are a surgeon."]
    for session, system, topic in zip(sessions, systems, ["heart", "lung", "skin", "bone"], strict=True):
        requests: list[ScriptedRequest] = session.inner.requests  # type: ignore[attr-defined]
        assert len(requests) == 2
        first, second = (r.messages for r in requests)
        assert first[0] == {"role": "system", "content": system}
        assert [m["content"].split("\n")[0] for m in first[1:]] == [f"{topic} first?"]
        assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
        assert second[1]["content"].startswith(f"{topic} first?")
        assert second[3]["content"].startswith(f"{topic} second?")
        assert [e.agent for e in session.events] == ["doctor" if "nurse" not in system else "nurse"] * 2


def test_a_side_question_stays_out_of_later_requests() -> None:
    session = _session()

    async def go() -> RoleAgent:
        agent = RoleAgent(session, name="doctor", role="generalist", system_message="sys")
        await agent.speak("Main question?", LETTER, step="answer")
        await agent.consult("Side question?", LETTER, step="check")
        await agent.speak("Follow-up?", LETTER, step="again")
        return agent

    agent = asyncio.run(go())
    requests = session.inner.requests  # type: ignore[attr-defined]
    side, later = requests[1].messages, requests[2].messages
    assert side[-1]["content"].startswith("Side question?") and len(side) == 4
    assert not any(m["content"].startswith("Side question?") for m in later) and len(later) == 4
    assert [type(m).__name__ for m in agent.history()] == ["UserMessage", "AssistantMessage"] * 2


def test_a_lent_agent_is_back_however_its_call_ends() -> None:
    pool = AgentPool()
    client = RecordingClient(_session())

    async def go() -> None:
        context = UnboundedChatCompletionContext()
        with pytest.raises(KeyError):
            with pool.lent("doctor", "sys", client, context) as agent:
                assert agent.name == "doctor"
                raise KeyError("the call failed")
        assert pool.idle() == 1
        with pool.lent("doctor", "sys", client, context) as again:
            assert again is agent and pool.idle() == 0
            with pool.lent("doctor", "sys", client, context) as other:
                assert other is not agent  # in use: another is built
        assert pool.idle() == 2 and pool.built == 2
        with pytest.raises(RuntimeError, match="not lent"):
            await agent.model_context.get_messages()  # back in the pool: bound to nothing

    asyncio.run(go())


def test_a_lent_agent_uses_the_client_and_context_it_is_lent_with() -> None:
    pool = AgentPool()
    sessions = [_session(lambda r: '{"answer": "A"}'), _session(lambda r: '{"answer": "B"}')]

    async def go() -> list[str]:
        out = []
        for session in sessions:
            context = UnboundedChatCompletionContext(initial_messages=[UserMessage(content="earlier", source="x")])
            with pool.lent("doctor", "sys", RecordingClient(session), context) as agent:
                response = await _reply(agent, TextMessage(content="now?", source="moderator"))
                out.append(response.chat_message.to_model_text())
                assert [type(m).__name__ for m in await context.get_messages()] == \
                    ["UserMessage", "UserMessage", "AssistantMessage"]
        return out

    assert asyncio.run(go()) == ['{"answer": "A"}', '{"answer": "B"}']
    assert pool.built == 1
    for session in sessions:
        sent = session.inner.requests[0].messages  # type: ignore[attr-defined]
        assert sent[0] == {"role": "system", "content": "sys"}
        assert [m["content"] for m in sent[1:]] == ["earlier", "now?"]


def test_the_pool_keeps_at_most_its_limit_of_idle_agents() -> None:
    pool = AgentPool(limit=3)
    client = RecordingClient(_session())

    async def go() -> None:
        for name in ["a", "b", "c", "d", "e"]:
            with pool.lent(name, None, client, UnboundedChatCompletionContext()):
                pass
        assert pool.idle() == 3
        with pool.lent("a", None, client, UnboundedChatCompletionContext()):
            pass  # the least recently used ("a", "b") went: "a" is built again
        assert pool.built == 6
        with pool.lent("e", None, client, UnboundedChatCompletionContext()):
            pass
        assert pool.built == 6

    asyncio.run(go())


def test_an_agent_name_autogen_refuses_is_refused_when_the_role_agent_is_made() -> None:
    with pytest.raises(ValueError, match="valid Python identifier"):
        RoleAgent(_session(), name="not an identifier", role="generalist", system_message="sys")


def test_system_message_none_sends_none() -> None:
    session = _session()

    async def go() -> None:
        await RoleAgent(session, name="doctor", role="generalist", system_message=None).speak("Q?", LETTER, step="s")

    asyncio.run(go())
    assert [m["role"] for m in session.inner.requests[0].messages] == ["user"]  # type: ignore[attr-defined]
