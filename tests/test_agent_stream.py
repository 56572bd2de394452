"""A role agent's reply reads AutoGen's stream to its end: the same reply and context as
`on_messages`, and no generator left for the event loop's finalizer to close (a task each)."""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Any

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.model.structured import answer_model


async def _speak(finalized: list[Any]) -> tuple[Any, list[Any]]:
    loop = asyncio.get_running_loop()
    hook = loop._asyncgen_finalizer_hook  # type: ignore[attr-defined]

    def counting(agen: Any) -> None:
        finalized.append(agen)
        hook(agen)

    firstiter, _ = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=counting)
    inner = ScriptedChatCompletionClient(lambda r: '{"answer": "B"}')
    session = QuestionSession(spec=ModelSpec(backend="scripted", temperature=0.0, seed=1), inner=inner)
    agent, reply = await RoleAgent.first_reply(session, name="doctor", role="generalist", system="sys",
                                                content="Which one?", model=answer_model(["A", "B"], reasoning=False),
                                                step="answer")
    history = agent.history()
    del agent
    gc.collect()
    await asyncio.sleep(0)
    return reply, history


def test_a_reply_leaves_no_generator_for_the_loops_finalizer() -> None:
    finalized: list[Any] = []
    reply, history = asyncio.run(_speak(finalized))
    assert reply is not None and reply.answer == "B"
    assert [type(m).__name__ for m in history] == ["UserMessage", "AssistantMessage"]
    assert history[1].content == '{"answer": "B"}'
    assert finalized == []
