"""AutoGen agents lent for one call at a time, so a question's roles do not build one each.

Building an `AssistantAgent` costs more CPU than anything else medpanel does around a model call
(AutoGen opens an OpenTelemetry span for every agent it creates), and a run built one for every
role of every question (the `direct` baseline: one per call). An agent holds nothing of a
conversation itself: its model client and its model context do. So each agent here is built over
a `LentClient` and a `LentContext` that pass every call on to whichever `RecordingClient` and
`WindowedContext` it is lent with, and `AgentPool.lent` hands out an idle agent of the same name
and system message (the only things an agent sends of its own) or builds one. While lent, an agent
serves that one call; it goes back when the call ends, however it ends. The agents are used
through AutoGen's public interface only: its constructor and `on_messages_stream`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import ChatCompletionClient, CreateResult, LLMMessage, ModelInfo, RequestUsage
from autogen_core.tools import Tool, ToolSchema

IDLE_LIMIT = 256
"""Idle agents kept at most, over all names and system messages (the least recently used go)."""


class LentClient(ChatCompletionClient):
    """An agent's model client: every method is that of the client it is lent with."""

    def __init__(self) -> None:
        self.target: ChatCompletionClient | None = None

    def _to(self) -> ChatCompletionClient:
        if self.target is None:
            raise RuntimeError("a pooled agent was used while not lent")
        return self.target

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        return await self._to().create(messages, **kwargs)

    def create_stream(self, messages: Sequence[LLMMessage], **kwargs: Any) -> AsyncGenerator[str | CreateResult, None]:
        return self._to().create_stream(messages, **kwargs)

    async def close(self) -> None:
        return None  # the lent client's owner closes it

    def actual_usage(self) -> RequestUsage:
        return self._to().actual_usage()

    def total_usage(self) -> RequestUsage:
        return self._to().total_usage()

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        return self._to().count_tokens(messages, tools=tools)

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        return self._to().remaining_tokens(messages, tools=tools)

    @property
    def capabilities(self) -> Any:  # deprecated in AutoGen, still abstract
        return self._to().model_info

    @property
    def model_info(self) -> ModelInfo:
        return self._to().model_info


class LentContext(ChatCompletionContext):
    """An agent's model context: every method is that of the context it is lent with."""

    def __init__(self) -> None:
        super().__init__()
        self.target: ChatCompletionContext | None = None

    def _to(self) -> ChatCompletionContext:
        if self.target is None:
            raise RuntimeError("a pooled agent was used while not lent")
        return self.target

    async def add_message(self, message: LLMMessage) -> None:
        await self._to().add_message(message)

    async def get_messages(self) -> list[LLMMessage]:
        return list(await self._to().get_messages())

    async def clear(self) -> None:
        await self._to().clear()

    async def save_state(self) -> Mapping[str, Any]:
        return await self._to().save_state()

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await self._to().load_state(state)


@dataclass
class _Slot:
    agent: AssistantAgent
    client: LentClient
    context: LentContext


class AgentPool:
    """Idle agents by (name, system message); shared by every thread's event loop (a lock)."""

    def __init__(self, limit: int = IDLE_LIMIT) -> None:
        self.limit = limit
        self.built = 0
        """Agents built so far (tests count them)."""
        self._idle: OrderedDict[tuple[str, str | None], list[_Slot]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    @contextmanager
    def lent(self, name: str, system_message: str | None, client: ChatCompletionClient,
             context: ChatCompletionContext) -> Iterator[AssistantAgent]:
        """An agent named `name` that sends `system_message`, with `client` and `context` as its own."""
        key = (name, system_message)
        with self._lock:
            slots = self._idle.get(key)
            slot = slots.pop() if slots else None
            if slot is not None:
                self._count -= 1
                if not slots:
                    del self._idle[key]
        if slot is None:
            slot = self._build(name, system_message)
        slot.client.target, slot.context.target = client, context
        try:
            yield slot.agent
        finally:
            slot.client.target = slot.context.target = None
            self._give_back(key, slot)

    def _build(self, name: str, system_message: str | None) -> _Slot:
        client, context = LentClient(), LentContext()
        agent = AssistantAgent(name=name, model_client=client, system_message=system_message, model_context=context)
        with self._lock:
            self.built += 1
        return _Slot(agent, client, context)

    def _give_back(self, key: tuple[str, str | None], slot: _Slot) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(slot)
            self._idle.move_to_end(key)
            self._count += 1
            while self._count > self.limit:
                oldest, slots = next(iter(self._idle.items()))
                slots.pop(0)
                self._count -= 1
                if not slots:
                    del self._idle[oldest]

    def idle(self) -> int:
        with self._lock:
            return self._count


AGENTS = AgentPool()
"""The process's pool: agents serve calls on any thread's loop, one call at a time."""
