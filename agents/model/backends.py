"""Model backends: one factory turns a scenario's `model:` settings into an AutoGen client.

A worker builds its clients on its own event loop and closes them when that loop ends (see
`agents.run.ClientPool`): an httpx client must not cross event loops and AutoGen's agents are
not thread-safe (DESIGN.md, known traps).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from autogen_core.models import ChatCompletionClient, ModelInfo

from medpanel.agents.model.errors import BackendError as BackendError  # re-exported where it always was
from medpanel.agents.model.lean_chat import LeanChatClient
from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.agents.model.spec import LOCAL_ACCOMMODATIONS, ModelSpec, credential_problem, key_env
from medpanel.agents.model.tls import ssl_context
from medpanel.agents.redact import register_secret

__all__ = ["LOCAL_ACCOMMODATIONS", "BackendError", "ModelSpec", "PostedChat", "build_client",  # noqa: F822
           "preload"]


def __getattr__(name: str) -> object:
    # `PostedChat` was defined here; it lives with the SDK it needs (posted_chat.py), imported when
    # asked for, so that start-up does not load the openai SDK for a run that never calls it.
    if name == "PostedChat":
        from medpanel.agents.model.posted_chat import PostedChat

        return PostedChat
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _http_client(spec: ModelSpec) -> Any:
    # No redirect followed, the body bounded, every answer's headers to the rate limits (sdk_http.py).
    # Imported here, so start-up of a run that is not Azure's loads no SDK: the SDK's transport is
    # Azure's alone (module docstring of posted_chat.py).
    from medpanel.agents.model.sdk_http import sdk_http_client

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


RawClient = ChatCompletionClient
"""What `build_client` builds: the model room's client type, named for the rooms that hold one."""
ClientFactory = Callable[[ModelSpec], ChatCompletionClient]
"""Builds the raw client of a model spec in place of `build_client` (tests, `medpanel.run`'s own)."""


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
    create_args: dict[str, object] = dict(model=spec.model_name, temperature=spec.temperature,
                                          max_tokens=spec.max_tokens)
    if spec.seed is not None:
        create_args["seed"] = spec.seed
    if spec.backend != "azure":
        # One aiohttp POST a call (agents/model/lean_chat.py): the SDK's request path cost more CPU
        # per call than all of medpanel's own work. The SDK's default URL and its variable apply.
        base = url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if spec.batch.enabled:  # each call a line of the next batch (agents/model/batching.py)
            # Its API client is the SDK's: start-up loads it for a batched run only.
            from medpanel.agents.model.batch_client import BatchChatClient

            return BatchChatClient(batch=spec.batch, base_url=base, api_key=key, timeout_s=spec.timeout_s,
                                   create_args=create_args, model_info=_model_info(spec),
                                   ssl=ssl_context() if base.startswith("https") else None,
                                   max_reply_bytes=spec.max_reply_bytes)
        return LeanChatClient(base_url=base, api_key=key, timeout_s=spec.timeout_s, create_args=create_args,
                              model_info=_model_info(spec), ssl=ssl_context() if base.startswith("https") else None,
                              max_reply_bytes=spec.max_reply_bytes)
    assert url is not None  # credential_problem refused Azure without one
    # The SDK and AutoGen's OpenAI client are Azure's alone: imported for it only, so start-up of
    # any other run loads neither (posted_chat.py).
    from medpanel.agents.model.posted_chat import PostedChat  # isort: skip
    import openai
    from autogen_ext.models.openai import BaseOpenAIChatCompletionClient

    sdk = openai.AsyncAzureOpenAI(azure_endpoint=url, azure_deployment=spec.model_name,
                                  api_version=spec.api_version or "2024-10-21", api_key=key, timeout=spec.timeout_s,
                                  http_client=_http_client(spec),
                                  max_retries=0)  # medpanel retries with its own backoff, recording each try
    return BaseOpenAIChatCompletionClient(client=PostedChat(sdk), create_args=create_args,  # type: ignore[arg-type]
                                          model_info=_model_info(spec))
