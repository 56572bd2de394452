"""Role agents: an AutoGen `AssistantAgent` per role instance, with structured replies.

Every call goes through `RecordingClient`, so each one is a transcript event. A reply that does
not validate gets exactly one re-ask; if that fails too the step is `invalid` (never a default).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage
from autogen_core import CancellationToken
from autogen_core.model_context import HeadAndTailChatCompletionContext, UnboundedChatCompletionContext
from autogen_core.models import LLMMessage, UserMessage
from pydantic import BaseModel

from medpanel.agents.client import QuestionSession, RecordingClient
from medpanel.agents.structured import format_instructions, parse_reply, reask_message
from medpanel.agents.types import Question


@cache
def prompt(name: str) -> str:
    """A role's prompt template from agents/prompts/<name>.md."""
    return resources.files("medpanel.agents").joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")


def render(name: str, **values: Any) -> str:
    return prompt(name).format_map(values).strip()


def agent_name(label: str, taken: set[str] | None = None) -> str:
    """AutoGen wants a Python identifier; keep the role readable and unique."""
    base = re.sub(r"\W+", "_", label.strip().lower()).strip("_") or "agent"
    if base[0].isdigit():
        base = f"a_{base}"
    name, i = base, 2
    while taken is not None and name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def format_question(q: Question) -> str:
    opts = "\n".join(f"({k}) {v}" for k, v in q.options.items())
    kind = "Select ALL correct options." if q.multi_answer else "Select the single best option."
    return f"Question:\n{q.text}\n\nOptions:\n{opts}\n\n{kind}"


class RoleAgent:
    """One model-backed participant (specialist, generalist, Challenger ...) in one question.

    `speak` is part of the discussion: the prompt and the reply stay in the agent's own context.
    `consult` is a side question (recruitment check, critique): it sees the agent's context but
    leaves it untouched, so a condition that asks it shares every later request with one that
    does not, and the response cache can answer those once.
    """

    def __init__(self, session: QuestionSession, *, name: str, role: str, system_message: str,
                 window: tuple[int, int] | None = None) -> None:
        self.session = session
        self.name = name
        self.role = role
        self.label = role
        self.system_message = system_message
        self.client = RecordingClient(session)
        # A head-and-tail window keeps the system prompt, the question and the newest posts when a
        # long debate would overflow a small model's context.
        context = HeadAndTailChatCompletionContext(*window) if window else UnboundedChatCompletionContext()
        self.agent = AssistantAgent(name=name, model_client=self.client, system_message=system_message,
                                    model_context=context)

    async def _ask(self, agent: AssistantAgent, content: str, model: type[BaseModel], *, step: str,
                   round: int, turn: int, source: str) -> BaseModel | None:
        self.client.tag.role, self.client.tag.agent, self.client.tag.step = self.role, self.name, step
        self.client.tag.round, self.client.tag.turn = round, turn
        self.client.response_model = model
        text = f"{content}\n\n{format_instructions(model)}"
        for attempt in range(2):
            response = await agent.on_messages([TextMessage(content=text, source=source)], CancellationToken())
            reply = response.chat_message
            raw = reply.content if isinstance(reply, TextMessage) else str(getattr(reply, "content", ""))
            parsed, reason = parse_reply(raw, model)
            event = self.client.last_event
            if event is not None:
                event.parsed = parsed.model_dump() if parsed else None
                if parsed is None:
                    event.error = f"unparsed reply: {reason}"
                    event.invalid = attempt == 1
                    event.data["reasked"] = attempt == 0
            if parsed is not None:
                return parsed
            text = reask_message(reason or "invalid", model)
            self.client.tag.step = f"{step}:reask"
        return None

    async def speak(self, content: str, model: type[BaseModel], *, step: str, round: int = 0, turn: int = 0,
                    source: str = "moderator") -> BaseModel | None:
        return await self._ask(self.agent, content, model, step=step, round=round, turn=turn, source=source)

    async def consult(self, content: str, model: type[BaseModel], *, step: str, round: int = 0, turn: int = 0,
                      source: str = "moderator") -> BaseModel | None:
        history = await self.agent.model_context.get_messages()
        side = AssistantAgent(name=self.name, model_client=self.client, system_message=self.system_message,
                              model_context=UnboundedChatCompletionContext(initial_messages=list(history)))
        return await self._ask(side, content, model, step=step, round=round, turn=turn, source=source)

    async def hear(self, text: str, source: str) -> None:
        """Append a post to this agent's context without a call (e.g. the trajectory so far)."""
        await self.agent.model_context.add_message(UserMessage(content=text, source=source))

    async def history(self) -> list[LLMMessage]:
        return await self.agent.model_context.get_messages()
