"""A call's messages are converted to OpenAI form once: `RecordingClient` converts them for the
call's event and the lean HTTP client sends those dicts, merged as AutoGen merges system messages,
to the same bytes as converting the AutoGen messages again would."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from autogen_core.models import AssistantMessage, LLMMessage, SystemMessage, UserMessage
from pydantic import BaseModel

from medpanel.agents.model import client as client_module
from medpanel.agents.model import lean_chat
from medpanel.agents.model.backends import ModelSpec, build_client
from medpanel.agents.model.client import QuestionSession, RecordingClient, to_openai
from medpanel.agents.model.lean_chat import LeanChatClient, merged_openai

from .fake_openai import FakeOpenAI, completion


def autogen_merged(messages: Sequence[LLMMessage]) -> list[LLMMessage]:
    """AutoGen's merge for models without `multiple_system_messages`, on its own messages (what the
    lean client did before it took converted dicts): the reference `merged_openai` must match."""
    if not any(isinstance(m, SystemMessage) for m in messages):
        return list(messages)
    out: list[LLMMessage] = []
    parts: list[str] = []
    first = last = -1
    for i, m in enumerate(messages):
        if isinstance(m, SystemMessage):
            if first == -1:
                first = i
            elif last + 1 != i:
                raise ValueError("system messages that are not consecutive cannot be merged into one")
            parts.append(m.content)
            last = i
        else:
            out.append(m)
    text = "\n".join(parts).rstrip()
    if text:
        out.insert(first, SystemMessage(content=text))
    return out


USER = UserMessage(content="Which one?", source="moderator")
CASES: list[list[LLMMessage]] = [
    [USER],
    [SystemMessage(content="You are a physician."), USER],
    [SystemMessage(content="You are a physician.  \n"), USER],
    [SystemMessage(content="First."), SystemMessage(content="Second.\n\n"), USER,
     AssistantMessage(content='{"answer": "A"}', source="a"), USER],
    [USER, SystemMessage(content="late one"), SystemMessage(content=" and another ")],
    [SystemMessage(content="   \n"), USER],
    [SystemMessage(content=""), SystemMessage(content=""), USER],
    [SystemMessage(content="ünïcode — kept\t"), UserMessage(content="ß " * 3, source="x")],
]


@pytest.mark.parametrize("messages", CASES)
def test_merged_openai_is_autogens_merge_converted(messages: list[LLMMessage]) -> None:
    given = [to_openai(m) for m in messages]
    before = json.dumps(given)
    assert merged_openai(given) == [to_openai(m) for m in autogen_merged(messages)]
    assert json.dumps(given) == before, "the event's own dicts are not changed"


def test_system_messages_apart_are_refused_as_autogen_refuses_them() -> None:
    messages: list[LLMMessage] = [SystemMessage(content="a"), USER, SystemMessage(content="b")]
    with pytest.raises(ValueError, match="not consecutive") as ours:
        merged_openai([to_openai(m) for m in messages])
    with pytest.raises(ValueError) as reference:
        autogen_merged(messages)
    assert str(ours.value) == str(reference.value)


@pytest.mark.parametrize("messages", CASES)
def test_the_payload_from_dicts_is_the_payload_from_autogen_messages(messages: list[LLMMessage]) -> None:
    client = build_client(ModelSpec(backend="openai", name="fake-model", base_url="http://127.0.0.1:9/v1",
                                    cache="off", max_tokens=33, seed=7))
    assert isinstance(client, LeanChatClient)
    extra = {"response_format": {"type": "json_object"}, "max_tokens": None, "seed": 3}
    body = {"messages": [to_openai(m) for m in autogen_merged(messages)], **client.create_args, **extra}
    old = json.dumps({k: v for k, v in body.items() if v is not None}, ensure_ascii=False).encode()
    assert client.payload(messages, (), extra) == old
    assert client.payload_of([to_openai(m) for m in messages], extra) == old


class Letter(BaseModel):
    answer: str


def test_a_call_converts_its_messages_once_and_sends_autogens_request(monkeypatch: pytest.MonkeyPatch) -> None:
    converted: list[str] = []

    def counted(message: LLMMessage) -> dict[str, str]:
        converted.append(type(message).__name__)
        return to_openai(message)

    # Both modules' names for the conversion: the recording client's and the lean client's.
    monkeypatch.setattr(client_module, "to_openai", counted)
    monkeypatch.setattr(lean_chat, "to_openai", counted)
    messages: list[LLMMessage] = [SystemMessage(content="You are a physician.  \n"), USER,
                                  AssistantMessage(content='{"answer": "A"}', source="direct"), USER]

    async def go() -> RecordingClient:
        inner = build_client(ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, cache="off",
                                       max_tokens=33, seed=7))
        recording = RecordingClient(QuestionSession(spec=ModelSpec(backend="openai", name="fake-model",
                                                                   base_url=srv.base_url, cache="off",
                                                                   max_tokens=33, seed=7), inner=inner))
        recording.response_model = Letter
        try:
            for _ in range(3):
                await recording.create(messages)
        finally:
            await inner.close()
        return recording

    with FakeOpenAI(lambda body, n: (200, {}, completion('{"answer": "B"}'))) as srv:
        recording = asyncio.run(go())
    assert len(converted) == 3 * len(messages), f"converted {len(converted)} messages for 3 calls of 4"
    expected: list[dict[str, Any]] = [to_openai(m) for m in autogen_merged(messages)]
    assert [body["messages"] for body in srv.requests] == [expected] * 3
    assert srv.requests[0]["response_format"]["type"] == "json_schema"
    event = recording.session.events[-1]
    assert event.messages[0] == {"role": "system", "content": "You are a physician.  \n"}, \
        "the transcript keeps the system message as the agent gave it"


def _recorded_calls(monkeypatch: pytest.MonkeyPatch, *, cache: Any = None, overrides: dict[str, object] | None = None
                    ) -> tuple[int, list[Any]]:
    """(how many times the call's cache-key request was built, the events) for 3 calls on the scripted model."""
    from medpanel.agents.model.scripted import ScriptedChatCompletionClient

    built: list[int] = []
    original = RecordingClient._request

    def counted(self: RecordingClient, messages: list[dict[str, Any]]) -> dict[str, Any]:
        built.append(1)
        return original(self, messages)

    monkeypatch.setattr(RecordingClient, "_request", counted)
    spec = ModelSpec(backend="scripted", cache="run" if cache is not None else "off")
    session = QuestionSession(spec=spec, inner=ScriptedChatCompletionClient(lambda r: {"answer": "A"}), cache=cache)
    recording = RecordingClient(session)
    recording.response_model = Letter
    recording.overrides = dict(overrides or {})

    async def go() -> None:
        for _ in range(3):
            await recording.create([USER])

    asyncio.run(go())
    return len(built), session.events


def test_no_cache_key_is_built_where_no_cache_or_replay_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    built, events = _recorded_calls(monkeypatch)
    assert built == 0 and len(events) == 3 and not any(e.cache_hit for e in events)


def test_a_cache_still_keys_every_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from medpanel.agents.model.cache import ResponseCache

    built, events = _recorded_calls(monkeypatch, cache=ResponseCache(tmp_path / "cache"))
    assert built == 3 and [e.cache_hit for e in events] == [False, True, True]


def test_an_unknown_sampling_override_is_still_refused_without_a_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown sampling override\(s\) \['top_p'\]"):
        _recorded_calls(monkeypatch, overrides={"top_p": 0.5})
