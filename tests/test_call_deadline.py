"""`RecordingClient` sets its deadline on a call only where the client's own does not already cover
the whole call: the lean HTTP client's (aiohttp's total timeout: connection, request and every byte
of the reply) does, so its calls carry one timer, not two; other clients keep the deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from autogen_core.models import UserMessage

from medpanel.agents.model.backends import ModelSpec, build_client
from medpanel.agents.model.client import QuestionSession, RecordingClient
from medpanel.agents.model.scripted import ScriptedChatCompletionClient

from .fake_openai import FakeOpenAI, completion
from .hostile_server import Hostile, ask, drip

TIMEOUT_S = 42.0


def _deadlines(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every `asyncio.timeout` of `RecordingClient`'s length (the call's timeout and 5 s of grace) entered."""
    set_at: list[float] = []
    original = asyncio.timeout

    def counted(delay: float | None) -> Any:
        if delay == TIMEOUT_S + 5:
            set_at.append(delay)
        return original(delay)

    monkeypatch.setattr(asyncio, "timeout", counted)
    return set_at


def _three_calls(session: QuestionSession) -> list[Any]:
    async def go() -> list[Any]:
        client = RecordingClient(session)
        try:
            return [await client.create([UserMessage(content=f"Which one, {i}?", source="u")]) for i in range(3)]
        finally:
            await session.inner.close()

    return asyncio.run(go())


def test_the_lean_clients_calls_carry_its_own_deadline_only(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines = _deadlines(monkeypatch)
    with FakeOpenAI(lambda body, n: (200, {}, completion('{"answer": "B"}'))) as srv:
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, cache="off", timeout_s=TIMEOUT_S)
        inner = build_client(spec)
        assert getattr(inner, "whole_call_s", None) == TIMEOUT_S
        results = _three_calls(QuestionSession(spec=spec, inner=inner))
    assert [r.content for r in results] == ['{"answer": "B"}'] * 3
    assert deadlines == []


def test_a_client_without_its_own_whole_deadline_keeps_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines = _deadlines(monkeypatch)
    spec = ModelSpec(backend="scripted", cache="off", timeout_s=TIMEOUT_S)
    _three_calls(QuestionSession(spec=spec, inner=ScriptedChatCompletionClient(lambda r: {"answer": "A"})))
    assert deadlines == [TIMEOUT_S + 5] * 3


def test_a_lean_client_with_a_longer_deadline_than_the_calls_keeps_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines = _deadlines(monkeypatch)
    with FakeOpenAI(lambda body, n: (200, {}, completion('{"answer": "B"}'))) as srv:
        inner = build_client(ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, cache="off",
                                       timeout_s=600))
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, cache="off", timeout_s=TIMEOUT_S)
        _three_calls(QuestionSession(spec=spec, inner=inner))
    assert deadlines == [TIMEOUT_S + 5] * 3


async def _drip(request: Any, raw: bytes, n: int) -> Any:
    return await drip(request, every_s=0.2, limit_s=60)


def test_a_reply_that_drips_still_ends_at_the_calls_timeout() -> None:
    with Hostile(_drip) as srv:
        start = time.monotonic()
        result, events = ask(srv.base_url, timeout_s=1.0, max_retries=0)
        took = time.monotonic() - start
    assert isinstance(result, Exception) and "no whole reply within model.timeout_s (1 s)" in str(result)
    assert events[0].error.startswith("timeout:") and took < 5
