"""Role agents: each call made by an AutoGen `AssistantAgent` (lent per call: `agent_pool`), with
structured replies.

Every call goes through `RecordingClient`, so each one is a transcript event. A reply that does
not validate gets exactly one re-ask; if that fails too the step is `invalid` (never a default).
"""

from __future__ import annotations

import re

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import Response
from autogen_agentchat.messages import TextMessage
from autogen_core import CancellationToken
from autogen_core.models import LLMMessage, UserMessage

from medpanel.agents.events import Act
from medpanel.agents.model.agent_pool import AGENTS
from medpanel.agents.model.client import QuestionSession, RecordingClient
from medpanel.agents.model.context import Part, Trim, WindowedContext, estimate_tokens
from medpanel.agents.model.route import for_role
from medpanel.agents.model.structured import R, format_instructions, parse_reply, reask_message
from medpanel.agents.types import TranscriptEvent


def agent_name(label: str, taken: set[str] | None = None) -> str:
    """AutoGen wants a Python identifier; keep the role readable and unique."""
    base = re.sub(r"\W+", "_", label.strip().lower()).strip("_") or "agent"
    if base[0].isdigit():
        base = f"a_{base}"
    name, i = base, 2
    while taken is not None and name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


async def _reply(agent: AssistantAgent, message: TextMessage) -> Response:
    """`agent.on_messages([message])`, with its stream read to the end.

    `on_messages` returns from inside its loop over `on_messages_stream` at the `Response`, which
    leaves that generator and the one it reads (`_process_model_result`) suspended: when they are
    collected, the event loop's async-generator finalizer schedules a task to close each, two
    tasks a call. An agent without tools yields the `Response` last and has nothing after it, so
    reading on lets both generators end by themselves."""
    response: Response | None = None
    async for item in agent.on_messages_stream([message], CancellationToken()):
        if isinstance(item, Response):
            response = item
    if response is None:
        raise AssertionError("the agent's stream ended without its final response")
    return response


class RoleAgent:
    """One model-backed participant (specialist, generalist, Challenger ...) in one question.

    `speak` is part of the discussion: the prompt and the reply stay in the agent's own context.
    `consult` is a side question (recruitment check, critique): it sees the agent's context but
    leaves it untouched, so a condition that asks it shares every later request with one that
    does not, and the response cache can answer those once.

    The context is the whole history (`agents.context.WindowedContext`), bounded only by the
    backend's declared context window. `parts` name the pieces of a prompt that such a window may
    drop (earlier positions); everything else in it is kept.
    """

    def __init__(self, session: QuestionSession, *, name: str, role: str, system_message: str | None) -> None:
        # `system_message=None`: the request carries no system message (a method whose original
        # sends the user turn alone).
        session = for_role(session, role)  # `roles: {challenger: {model: LABEL}}` routes its calls
        self.session = session
        self.name = name
        self.role = role
        self.label = role
        self.system_message = system_message
        self.client = RecordingClient(session)
        spec = session.spec
        self.context = WindowedContext(window=spec.context_limit,
                                       reserve=estimate_tokens(system_message or "") + spec.max_tokens,
                                       on_trim=self._trimmed)
        if not name.isidentifier():  # AutoGen's own check, where it built the agent
            raise ValueError("The agent name must be a valid Python identifier.")

    def _trimmed(self, trim: Trim) -> None:
        tag = self.client.tag
        what = ", ".join(trim.new) if trim.new else "nothing new"
        self.session.record(TranscriptEvent(
            kind="note", role=self.role, agent=self.name, step="context_trimmed", round=tag.round, turn=tag.turn,
            content=f"{tag.step}: {len(trim.dropped)} earlier position(s) left out to fit the {trim.window}-token "
                    f"context window (newly: {what})" + ("; still over the window" if trim.still_over else ""),
            data={"for_step": tag.step, "dropped": trim.dropped, "newly_dropped": trim.new,
                  "tokens_before": trim.tokens_before, "tokens_after": trim.tokens_after,
                  "window": trim.window, "budget": trim.budget, "still_over": trim.still_over}))

    async def _ask(self, context: WindowedContext, content: str, model: type[R], *, step: str,
                   round: int, turn: int, source: str, parts: list[Part] | None = None,
                   act: Act | None = None) -> R | None:
        """Ask over `context` (the agent's own, or a fork for a side question), by an AutoGen agent
        lent for each call (`agent_pool`): this one's name and system message, its client and `context`."""
        self.client.tag.role, self.client.tag.agent, self.client.tag.step = self.role, self.name, step
        self.client.tag.round, self.client.tag.turn, self.client.tag.act = round, turn, act
        self.client.response_model = model
        text = f"{content}\n\n{format_instructions(model)}"
        where = f" (round {round}, turn {turn})" if round or turn else ""
        label = f"{self.name}'s own {step} reply{where}"
        for attempt in range(2):
            context.expect(parts if attempt == 0 else None, reply=label)
            with AGENTS.lent(self.name, self.system_message, self.client, context) as agent:
                response = await _reply(agent, TextMessage(content=text, source=source))
            raw = response.chat_message.to_model_text()  # an agent with no tools answers with a TextMessage
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

    @classmethod
    async def first_reply(cls, session: QuestionSession, *, name: str, role: str, system: str | None, content: str,
                          model: type[R], step: str, round: int = 0, turn: int = 0,
                          parts: list[Part] | None = None, act: Act | None = None) -> tuple[RoleAgent, R | None]:
        """A fresh agent and its reply to `content` (as `speak`): built and asked in one call. The agent
        comes back for what follows in the same conversation (a rewrite, its recorded event)."""
        agent = cls(session, name=name, role=role, system_message=system)
        return agent, await agent.speak(content, model, step=step, round=round, turn=turn, parts=parts, act=act)

    async def speak(self, content: str, model: type[R], *, step: str, round: int = 0, turn: int = 0,
                    source: str = "moderator", parts: list[Part] | None = None, act: Act | None = None) -> R | None:
        """The reply to `content` as a `model` (None when it is invalid twice); both stay in the context.
        `act`: what the reply is in the debate (`AnswerAt` for an answer the tables count)."""
        return await self._ask(self.context, content, model, step=step, round=round, turn=turn, source=source,
                               parts=parts, act=act)

    async def consult(self, content: str, model: type[R], *, step: str, round: int = 0, turn: int = 0,
                      source: str = "moderator", parts: list[Part] | None = None, act: Act | None = None
                      ) -> R | None:
        """As `speak`, on a fork of the context: this agent's later requests do not show it."""
        return await self._ask(self.context.fork(), content, model, step=step, round=round, turn=turn,
                               source=source, parts=parts, act=act)

    async def hear(self, text: str, source: str, parts: list[Part] | None = None) -> None:
        """Append a post to this agent's context without a call (e.g. the trajectory so far)."""
        self.context.expect(parts)
        await self.context.add_message(UserMessage(content=text, source=source))

    def history(self) -> list[LLMMessage]:
        """Everything this agent was shown and said (a request may see less: see `WindowedContext`)."""
        return self.context.full()
