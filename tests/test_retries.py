"""A model call's attempts: the first without tenacity, the rest under it, with the same backoff
(0.5 s, 1 s, 2 s ... or the endpoint's Retry-After) and the same total of 1 + max_retries."""

from __future__ import annotations

import asyncio

import openai
import pytest

from medpanel.agents.model import retries
from medpanel.agents.model.lean_chat import SDK_HTTPX
from medpanel.agents.model.retries import with_retries


def _status(code: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    request = SDK_HTTPX.Request("POST", "http://endpoint.test/v1/chat/completions")
    response = SDK_HTTPX.Response(code, headers=headers or {}, request=request)
    cls = {429: openai.RateLimitError, 400: openai.BadRequestError}.get(code, openai.InternalServerError)
    return cls("refused", response=response, body=None)


def _attempts(failures: list[BaseException], max_retries: int,
              monkeypatch: pytest.MonkeyPatch) -> tuple[object, int, list[float]]:
    waits: list[float] = []
    real = asyncio.sleep

    async def sleep(seconds: float, *args: object) -> None:
        waits.append(round(seconds, 3))
        await real(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    monkeypatch.setattr(retries.asyncio, "sleep", sleep)
    calls = 0

    async def once() -> str:
        nonlocal calls
        calls += 1
        if calls <= len(failures):
            raise failures[calls - 1]
        return "ok"

    async def go() -> object:
        try:
            return await with_retries(once, max_retries)
        except Exception as exc:
            return exc

    return asyncio.run(go()), calls, waits


def test_success_at_once_makes_one_attempt_and_waits_for_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _attempts([], 3, monkeypatch) == ("ok", 1, [])


def test_failures_back_off_exponentially_across_the_handover(monkeypatch: pytest.MonkeyPatch) -> None:
    out, calls, waits = _attempts([_status(500), _status(503), _status(500)], 4, monkeypatch)
    assert out == "ok" and calls == 4
    assert waits == [0.5, 1.0, 2.0]


def test_retry_after_is_obeyed_on_the_first_and_later_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    out, calls, waits = _attempts([_status(429, {"retry-after": "3"}), _status(429, {"retry-after-ms": "1500"})],
                                  2, monkeypatch)
    assert out == "ok" and calls == 3 and waits == [3.0, 1.5]


def test_the_total_is_one_plus_max_retries_and_the_last_error_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    errors: list[BaseException] = [_status(500) for _ in range(5)]
    out, calls, _ = _attempts(errors, 2, monkeypatch)
    assert calls == 3 and out is errors[2]
    out, calls, waits = _attempts([_status(500)], 0, monkeypatch)
    assert calls == 1 and isinstance(out, openai.InternalServerError) and waits == []


def test_a_non_retryable_error_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    error = _status(400)
    out, calls, waits = _attempts([error], 3, monkeypatch)
    assert out is error and calls == 1 and waits == []
