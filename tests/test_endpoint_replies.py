"""A 200 reply that is not a chat completion (an HTML login page, no choices) is named as what the
endpoint sent, not as the internal error AutoGen meets on it."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from medpanel.agents.model.backends import PostedChat
from medpanel.agents.model.client import error_kind

from .fake_openai import completion


def _post(status: int, content_type: str, body: str) -> BaseException:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"content-type": content_type}, content=body.encode())

    async def go() -> BaseException:
        sdk = openai.AsyncOpenAI(api_key="sk-test", base_url="http://endpoint.test/v1", max_retries=0,
                                 http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer)))
        chat = PostedChat(sdk)
        try:
            await chat.create(model="m", messages=[{"role": "user", "content": "hi"}])
        except Exception as exc:
            return exc
        finally:
            await chat.close()
        raise AssertionError("the reply was accepted")

    return asyncio.run(go())


def test_an_html_page_is_named_as_such() -> None:
    exc = _post(200, "text/html", "<!DOCTYPE html><html><body>Sign in to the proxy</body></html>")
    assert "HTML page" in str(exc) and "Sign in to the proxy" in str(exc), exc
    assert error_kind(exc) == "bad_response"


@pytest.mark.parametrize("body", [{**completion("x"), "choices": []}])
def test_a_completion_without_choices_is_named_as_such(body: dict[str, object]) -> None:
    exc = _post(200, "application/json", json.dumps(body))
    assert "no choices" in str(exc), exc
    assert error_kind(exc) == "bad_response"
