"""The lean chat client (one aiohttp POST a call) keeps the SDK path's request and error handling:
the same body, the SDK's exception per status (so retries, kinds and Retry-After read it alike),
connection and timeout errors, a 200 that is not a completion named as what came instead, and the
probe fed with every reply's headers and the cached prompt tokens."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import openai
import pytest
from autogen_core.models import SystemMessage, UserMessage

from medpanel.agents.model.backends import ModelSpec, build_client
from medpanel.agents.model.client import describe_error, error_kind
from medpanel.agents.model.lean_chat import LeanChatClient
from medpanel.agents.model.limits import RateLimits
from medpanel.agents.model.probe import probing
from medpanel.agents.model.retries import retry_after_of

from .fake_openai import FakeOpenAI, completion

MESSAGES = [SystemMessage(content="You are a physician.  \n"), UserMessage(content="Which one?", source="direct")]


def _client(base_url: str, **spec: Any) -> LeanChatClient:
    client = build_client(ModelSpec(backend="openai", name="fake-model", base_url=base_url, cache="off",
                                    max_tokens=33, seed=7, **spec))
    assert isinstance(client, LeanChatClient)
    return client


def _call(base_url: str, extra: dict[str, Any] | None = None, limits: RateLimits | None = None,
          timeout_s: float = 60) -> tuple[Any, int]:
    """(the CreateResult or the exception raised, cached tokens the probe saw)."""
    async def go() -> tuple[Any, int]:
        client = _client(base_url, timeout_s=timeout_s)
        try:
            with probing(limits) as probe:
                try:
                    return await client.create(MESSAGES, extra_create_args=extra or {}), probe.cached_tokens
                except Exception as exc:
                    return exc, probe.cached_tokens
        finally:
            await client.close()
            assert client.is_closed()

    return asyncio.run(go())


def test_the_body_is_autogens_request_and_the_reply_is_read() -> None:
    reply = completion('{"answer": "B"}', prompt_tokens=21, completion_tokens=4)
    reply["usage"]["prompt_tokens_details"] = {"cached_tokens": 16}
    with FakeOpenAI(lambda body, n: (200, {}, reply)) as srv:
        result, cached = _call(srv.base_url, {"response_format": {"type": "json_object"}, "max_tokens": None})
    assert result.content == '{"answer": "B"}' and result.finish_reason == "stop"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, cached) == (21, 4, 16)
    body = srv.requests[0]
    # AutoGen strips the system message's trailing whitespace and names the user by its source.
    assert body["messages"] == [{"role": "system", "content": "You are a physician."},
                                {"role": "user", "name": "direct", "content": "Which one?"}]
    assert body["model"] == "fake-model" and body["seed"] == 7 and body["temperature"] == 0.0
    assert "max_tokens" not in body, "a max_tokens: None override is sent as no cap"
    assert body["response_format"] == {"type": "json_object"}
    assert srv.paths[0] == "/v1/chat/completions" and srv.headers[0]["authorization"].startswith("Bearer ")


@pytest.mark.parametrize(("status", "body", "kind", "cls"), [
    (429, {"error": {"message": "slow down", "type": "rate_limit"}}, "rate_limit", openai.RateLimitError),
    (503, {"error": {"message": "overloaded"}}, "server_error", openai.InternalServerError),
    (401, {"error": {"message": "bad key", "type": "invalid_request_error"}}, "http_401", openai.AuthenticationError),
    (400, {"error": {"message": "This model's maximum context length is 2048 tokens"}}, "context_length",
     openai.BadRequestError),
])
def test_an_error_reply_is_the_sdks_exception_for_it(status: int, body: dict[str, Any], kind: str,
                                                      cls: type[Exception]) -> None:
    limits = RateLimits()
    with FakeOpenAI(lambda b, n: (status, {"retry-after": "3"}, body)) as srv:
        exc, _ = _call(srv.base_url, limits=limits)
    assert isinstance(exc, cls), exc
    assert error_kind(exc) == kind
    assert retry_after_of(exc) == 3.0
    assert body["error"]["message"] in describe_error(exc)
    assert limits.stats.rate_limited == (status == 429), "the reply's headers reach the rate limits"


@pytest.mark.parametrize(("content_type", "text", "said"), [
    ("text/html", "<!DOCTYPE html><html><body>Sign in to the proxy</body></html>", "HTML page"),
    ("application/json", json.dumps({**completion("x"), "choices": []}), "no choices"),
    ("application/json", json.dumps(completion("x"))[:40], "text"),
])
def test_a_200_that_is_not_a_completion_is_a_named_bad_response(content_type: str, text: str, said: str) -> None:
    with FakeOpenAI(lambda b, n: (200, {"content-type": content_type}, text)) as srv:
        exc, _ = _call(srv.base_url)
    assert isinstance(exc, ValueError) and said in str(exc), exc
    assert error_kind(exc) == "bad_response"


def test_a_refused_connection_is_a_connection_error_naming_the_cause() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    exc, _ = _call(f"http://127.0.0.1:{port}/v1")
    assert isinstance(exc, openai.APIConnectionError) and error_kind(exc) == "connection"
    assert "refused" in describe_error(exc).lower(), describe_error(exc)


def test_a_dropped_connection_is_a_connection_error() -> None:
    with FakeOpenAI(lambda b, n: (0, {}, "")) as srv:
        exc, _ = _call(srv.base_url)
    assert isinstance(exc, openai.APIConnectionError) and error_kind(exc) == "connection", exc


def test_a_slow_reply_is_a_timeout() -> None:
    with FakeOpenAI(lambda b, n: (200, {}, completion("x")), latency_ms=1500) as srv:
        exc, _ = _call(srv.base_url, timeout_s=0.3)
    assert isinstance(exc, openai.APITimeoutError) and error_kind(exc) == "timeout", exc


def test_tool_calls_are_refused() -> None:
    reply = completion("")
    reply["choices"][0]["message"] = {"role": "assistant", "content": None,
                                      "tool_calls": [{"id": "c1", "type": "function",
                                                      "function": {"name": "f", "arguments": "{}"}}]}
    with FakeOpenAI(lambda b, n: (200, {}, reply)) as srv:
        exc, _ = _call(srv.base_url)
    assert isinstance(exc, ValueError) and "tool calls" in str(exc)


def test_the_proxy_the_environment_names_carries_the_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fake endpoint stands in for the proxy: a request for an endpoint that does not resolve
    # reaches it only through HTTP_PROXY, as an absolute URL in its request line.
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # a remote endpoint needs a key (a local one does not)
    with FakeOpenAI(lambda body, n: (200, {}, completion('{"answer": "A"}'))) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
        result, _ = _call("http://endpoint.invalid:8000/v1")
        assert not isinstance(result, Exception), result
        assert result.content == '{"answer": "A"}'
        assert proxy.paths == ["http://endpoint.invalid:8000/v1/chat/completions"]
        monkeypatch.setenv("NO_PROXY", "endpoint.invalid")
        bypassed, _ = _call("http://endpoint.invalid:8000/v1")
    assert isinstance(bypassed, openai.APIConnectionError), "NO_PROXY sends the request past the proxy"
    assert len(proxy.paths) == 1
