"""The openai SDK's path, kept for Azure (its deployment routes and `api-key` header): `PostedChat`.

Its own module so that the openai SDK and AutoGen's OpenAI client (half a second of imports) load
only for a run whose model is on Azure (`backends.build_client`); every other endpoint goes
through `lean_chat.LeanChatClient`, and a scripted run through neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion

from medpanel.agents.model.client import unsent
from medpanel.agents.model.lean_chat import sent
from medpanel.agents.model.probe import note_cached
from medpanel.agents.model.reply_bounds import BadReply, completion_choices, parse_json, usage_of


class PostedChat:
    """`client.chat.completions.create` for AutoGen's OpenAI client, sent with the SDK's `post`.

    The SDK's own `create` first walks every request through its TypedDict transform: about 2 ms
    of CPU for a two-message request and 0.4 ms more per message (9 ms at 20 messages; measure
    with `python -m benchmarks.bench_perf --sdk`). Worker threads share one
    interpreter lock, so in a long panel debate that walk, not the model, bounds throughput.
    AutoGen already hands over JSON-ready dicts, so the body is posted as it is; the SDK still does
    the URL (Azure deployments included), auth, timeout and error types. The reply is parsed here,
    under the bounds `LeanChatClient` reads with (`reply_bounds.py`).
    """

    def __init__(self, sdk: openai.AsyncOpenAI) -> None:
        self.sdk = sdk
        self.chat = self  # AutoGen calls client.chat.completions.create(...)
        self.completions = self

    async def create(self, *, stream: bool = False, timeout: Any = openai.NOT_GIVEN,
                     extra_headers: Mapping[str, str] | None = None, extra_body: Mapping[str, Any] | None = None,
                     **params: Any) -> ChatCompletion:
        if stream:
            raise ValueError("medpanel roles do not stream")
        # A per-call `max_tokens: None` or `temperature: None` override: no field, the endpoint's own default.
        body = unsent({k: v for k, v in params.items() if not isinstance(v, openai.NotGiven)} | dict(extra_body or {}))
        options: dict[str, object] = {}
        if not isinstance(timeout, openai.NotGiven):
            options["timeout"] = timeout
        if extra_headers:
            options["headers"] = dict(extra_headers)
        # `options` holds keys of the SDK's RequestOptions TypedDict (timeout, headers) only. The body
        # comes back as bytes (read under model.max_reply_bytes, sdk_http.py) and is parsed here: the
        # SDK would build a model for every choice listed, and its parser does not bound the depth.
        raw: Any = await self.sdk.post("/chat/completions", body=body, cast_to=bytes, options=cast(Any, options))
        payload = parse_json(raw)
        choices = completion_choices(payload)
        if choices is None:
            # Named here: AutoGen would fail on it with its own internal text ("'str' object has no
            # attribute 'usage'", "list index out of range"). A ValueError is a retried bad_response.
            shown = payload if isinstance(payload, dict) else bytes(raw).decode("utf-8", errors="replace")
            raise ValueError(f"the endpoint answered 200 with {sent(shown)}, not a chat completion's choices")
        assert isinstance(payload, dict)
        if not isinstance(choices[0].get("message") or {}, dict):
            raise BadReply("the endpoint's choices[0].message is not an object")
        prompt, completion, cached = usage_of(payload)
        note_cached(cached)  # cached prompt tokens, which AutoGen's CreateResult drops
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        return ChatCompletion.construct(**{**payload, "choices": choices[:1], "usage": usage})

    async def close(self) -> None:
        await self.sdk.close()
