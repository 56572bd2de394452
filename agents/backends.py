"""Model backends: one factory turns a scenario's `model:` settings into an AutoGen client.

Clients are built per trial and closed after it: an httpx client must not cross event loops and
AutoGen's agents are not thread-safe (DESIGN.md, known traps).
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Any, Literal

from autogen_core.models import ChatCompletionClient, ModelInfo
from pydantic import BaseModel, ConfigDict, Field, field_validator

BACKENDS = ("local", "openai", "azure", "scripted")
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "prompt")
LOCAL_MODEL_NAME = "SmolLM2-135M-Instruct"


class ModelSpec(BaseModel):
    """The `model:` block of a scenario."""

    model_config = ConfigDict(extra="forbid")

    backend: str = "local"
    """`local` (embedded SmolLM2 via llama.cpp's server), `openai` (any OpenAI-compatible
    endpoint: OpenAI, vLLM, Ollama, llama.cpp), `azure`, or `scripted` (deterministic, for tests)."""
    name: str | None = None
    """Model name sent to the endpoint. Defaults to the embedded model's name for `local`."""
    base_url: str | None = None
    """Endpoint URL, e.g. `http://localhost:8000/v1`. Unset means OpenAI itself for `openai`."""
    api_key_env: str | None = None
    """Name of the environment variable that holds the key. The key itself never enters a file."""
    api_version: str | None = None
    """Azure API version (backend `azure`)."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = 42
    max_tokens: int = Field(default=512, ge=16)
    structured_output: str = "auto"
    """How answers are constrained: `json_schema` (OpenAI, vLLM), `json_object` (+ schema, what
    llama.cpp's server accepts), `prompt` (instructions + validate + one re-ask). `auto` picks by
    backend."""
    timeout_s: float = Field(default=120.0, gt=0)
    """Per-call timeout."""
    max_retries: int = Field(default=4, ge=0)
    """Retries of a failing call (429, 5xx, timeouts, dropped connections) with backoff."""
    cache: Literal["run", "off"] = "run"
    """`run` answers identical requests once per run directory (shared by all conditions)."""
    max_string_chars: int | None = Field(default=None, ge=20)
    """`json_object` mode only: cap every free-text field of a reply at this many characters in the
    grammar, so a small model cannot loop inside a string until `max_tokens` cuts the JSON. Default
    240 for the embedded model (grammar-constrained decoding runs ~25 tokens/s on 2 cores), none
    elsewhere (OpenAI's strict schemas reject `maxLength`)."""
    context_window: int = Field(default=8192, ge=512)
    """Context length the embedded server is started with."""
    family: str = "unknown"
    """AutoGen model family, for names AutoGen does not know."""
    latency_ms: float = Field(default=0.0, ge=0)
    """`scripted` only: a fixed latency per call, for benchmarks."""

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        if v not in BACKENDS:
            raise ValueError(f"unknown backend {v!r}; use one of {', '.join(BACKENDS)}")
        return v

    @field_validator("structured_output")
    @classmethod
    def _known_mode(cls, v: str) -> str:
        if v not in STRUCTURED_MODES:
            raise ValueError(f"unknown structured_output {v!r}; use one of {', '.join(STRUCTURED_MODES)}")
        return v

    @property
    def model_name(self) -> str:
        if self.name:
            return self.name
        return LOCAL_MODEL_NAME if self.backend == "local" else "scripted" if self.backend == "scripted" else ""

    @property
    def string_cap(self) -> int | None:
        if self.max_string_chars is not None:
            return self.max_string_chars
        return 240 if self.backend == "local" else None

    @property
    def mode(self) -> str:
        """The structured-output mode actually used."""
        if self.structured_output != "auto":
            return self.structured_output
        # llama.cpp's server rejects `json_schema` but grammar-constrains `json_object` + schema.
        return {"local": "json_object", "scripted": "json_schema"}.get(self.backend, "json_schema")


class BackendError(RuntimeError):
    """A backend cannot be built (missing key or extra); the message names the fix."""


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context for the process: loading the CA bundle costs ~70 ms, and clients are built per
    question. A context (unlike an httpx client) is safe to share across threads and event loops."""
    return ssl.create_default_context()


def _http_client(spec: ModelSpec) -> Any:
    import openai

    return openai.DefaultAsyncHttpxClient(verify=_ssl_context(), timeout=spec.timeout_s)


def _model_info(spec: ModelSpec) -> ModelInfo:
    return ModelInfo(vision=False, function_calling=False, json_output=True, family=spec.family,
                     structured_output=True)


def build_client(spec: ModelSpec, *, base_url: str | None = None) -> ChatCompletionClient:
    """Build the raw client for one trial. `base_url` overrides the spec (the local server's URL)."""
    if spec.backend == "scripted":
        from medpanel.agents.scripted import ScriptedChatCompletionClient

        return ScriptedChatCompletionClient(latency_ms=spec.latency_ms)
    try:
        from autogen_ext.models.openai import AzureOpenAIChatCompletionClient, OpenAIChatCompletionClient
    except ImportError as exc:  # pragma: no cover - autogen-ext[openai] is a core dependency
        raise BackendError("the OpenAI client is missing: "
                           "install with pip install 'autogen-ext[openai]==0.7.5'") from exc

    url = base_url or spec.base_url
    key: str
    if spec.backend == "local":
        key = "sk-local-no-key"  # llama.cpp's server ignores it; the openai client insists on one
    else:
        env = spec.api_key_env or ("AZURE_OPENAI_API_KEY" if spec.backend == "azure" else "OPENAI_API_KEY")
        value = os.environ.get(env)
        if not value:
            if url and ("127.0.0.1" in url or "localhost" in url):
                value = "sk-no-key"  # local servers (vLLM, Ollama, llama.cpp) need no key
            else:
                raise BackendError(f"model.api_key_env: environment variable {env} is not set. "
                                   f"Export your key as {env}")
        key = value
    common = dict(
        model=spec.model_name,
        api_key=key,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        timeout=spec.timeout_s,
        max_retries=0,  # medpanel retries with its own backoff and records every attempt
        http_client=_http_client(spec),
    )
    if spec.seed is not None:
        common["seed"] = spec.seed
    if spec.backend == "azure":
        if not url:
            raise BackendError("model.base_url: Azure needs the endpoint URL. "
                               "Set model.base_url to https://<name>.openai.azure.com")
        return AzureOpenAIChatCompletionClient(azure_endpoint=url, azure_deployment=spec.model_name,
                                               api_version=spec.api_version or "2024-10-21",
                                               model_info=_model_info(spec), **common)
    kwargs = dict(common)
    if url:
        kwargs["base_url"] = url
    # Non-OpenAI names (vLLM, Ollama, llama.cpp) need model_info; OpenAI names are known to AutoGen.
    if spec.backend == "local" or url:
        kwargs["model_info"] = _model_info(spec)
    return OpenAIChatCompletionClient(**kwargs)
