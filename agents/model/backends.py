"""Model backends: one factory turns a scenario's `model:` settings into an AutoGen client.

A worker builds its clients on its own event loop and closes them when that loop ends (see
`agents.run.ClientPool`): an httpx client must not cross event loops and AutoGen's agents are
not thread-safe (DESIGN.md, known traps).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

import openai
from autogen_core.models import ChatCompletionClient, ModelInfo
from autogen_ext.models.openai import BaseOpenAIChatCompletionClient
from openai.types.chat import ChatCompletion

from medpanel.agents.model.batch_client import BatchChatClient
from medpanel.agents.model.client import unsent
from medpanel.agents.model.errors import BackendError as BackendError  # re-exported where it always was
from medpanel.agents.model.lean_chat import LeanChatClient, sent
from medpanel.agents.model.probe import note_cached
from medpanel.agents.model.reply_bounds import BadReply, completion_choices, parse_json, usage_of
from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.agents.model.sdk_http import sdk_http_client, ssl_context
from medpanel.agents.model.spec import LOCAL_ACCOMMODATIONS, ModelSpec, credential_problem, key_env
from medpanel.agents.redact import register_secret

__all__ = ["LOCAL_ACCOMMODATIONS", "BackendError", "ModelSpec", "PostedChat", "build_client", "preload"]

def _http_client(spec: ModelSpec) -> Any:
    # No redirect followed, the body bounded, every answer's headers to the rate limits (sdk_http.py).
    return sdk_http_client(spec.timeout_s, spec.max_reply_bytes)


def preload(spec: ModelSpec) -> None:
    """Import now what the HTTP client imports lazily on its first request.

    Left lazy, these imports land inside the first question's recorded latency and skew latency
    figures. A runner (and each of its child processes) calls this during start-up, so it loads
    only what its backend's client uses: aiohttp's for `LeanChatClient`; for Azure, the SDK's
    transport, resources and JSON parser (~0.3 s).
    """
    if spec.backend == "scripted":
        return
    import importlib

    azure = spec.backend == "azure"
    lazy = ("openai.resources.chat", "openai.pagination", "h11", "anyio._backends._asyncio", "jiter") if azure \
        else ("aiohttp.client", "aiohttp.connector")
    for name in lazy:
        importlib.import_module(name)
    if azure:
        _http_client(spec)  # builds (never opens) a transport: imports httpcore and the TLS helpers


def _model_info(spec: ModelSpec) -> ModelInfo:
    return ModelInfo(vision=False, function_calling=False, json_output=True, family=spec.family,
                     structured_output=True)


def build_client(spec: ModelSpec, *, base_url: str | None = None) -> ChatCompletionClient:
    """Build the raw client for one trial. `base_url` overrides the spec (the local server's URL)."""
    if spec.backend == "scripted":
        return ScriptedChatCompletionClient(latency_ms=spec.latency_ms)
    url = base_url or spec.base_url
    key: str
    if spec.backend == "local":
        key = "sk-local-no-key"  # llama.cpp's server ignores it; the openai client insists on one
    else:
        problem = credential_problem(spec, url)
        if problem:
            raise BackendError(problem)
        # Local servers (vLLM, Ollama, llama.cpp) need no key; the openai client insists on one.
        value = os.environ.get(key_env(spec)) or "sk-no-key"
        key = value
        register_secret(key)  # masked wherever an endpoint echoes it back (see agents/redact.py)
    create_args: dict[str, Any] = dict(model=spec.model_name, temperature=spec.temperature, max_tokens=spec.max_tokens)
    if spec.seed is not None:
        create_args["seed"] = spec.seed
    if spec.backend != "azure":
        # One aiohttp POST a call (agents/model/lean_chat.py): the SDK's request path cost more CPU
        # per call than all of medpanel's own work. The SDK's default URL and its variable apply.
        base = url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if spec.batch.enabled:  # each call a line of the next batch (agents/model/batching.py)
            return BatchChatClient(batch=spec.batch, base_url=base, api_key=key, timeout_s=spec.timeout_s,
                                   create_args=create_args, model_info=_model_info(spec),
                                   ssl=ssl_context() if base.startswith("https") else None,
                                   max_reply_bytes=spec.max_reply_bytes)
        return LeanChatClient(base_url=base, api_key=key, timeout_s=spec.timeout_s, create_args=create_args,
                              model_info=_model_info(spec), ssl=ssl_context() if base.startswith("https") else None,
                              max_reply_bytes=spec.max_reply_bytes)
    assert url is not None  # credential_problem refused Azure without one
    sdk = openai.AsyncAzureOpenAI(azure_endpoint=url, azure_deployment=spec.model_name,
                                  api_version=spec.api_version or "2024-10-21", api_key=key, timeout=spec.timeout_s,
                                  http_client=_http_client(spec),
                                  max_retries=0)  # medpanel retries with its own backoff, recording each try
    return BaseOpenAIChatCompletionClient(client=PostedChat(sdk), create_args=create_args,  # type: ignore[arg-type]
                                          model_info=_model_info(spec))


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
        options: dict[str, Any] = {}
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
