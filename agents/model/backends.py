"""Model backends: one factory turns a scenario's `model:` settings into an AutoGen client.

A worker builds its clients on its own event loop and closes them when that loop ends (see
`agents.run.ClientPool`): an httpx client must not cross event loops and AutoGen's agents are
not thread-safe (DESIGN.md, known traps).
"""

from __future__ import annotations

import functools
import os
import re
import ssl
from collections.abc import Mapping
from typing import Any, Literal

import openai
from autogen_core.models import ChatCompletionClient, ModelInfo
from autogen_ext.models.openai import BaseOpenAIChatCompletionClient
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ConfigDict, Field, field_validator

from medpanel.agents.redact import register_secret

BACKENDS = ("local", "openai", "azure", "scripted")
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "prompt")
LOCAL_MODEL_NAME = "SmolLM2-135M-Instruct"

LOCAL_ACCOMMODATIONS: dict[str, int] = {
    "context_window": 8192,
    "passage_chars": 600,
    "verifier_passage_chars": 400,
    "max_string_chars": 240,
}
"""The embedded 135M model's limits: its server's context (tokens), passage lengths shown to the
curator / CLEAR's pathways and to CLEAR's verifier (characters), and the grammar cap on free-text
reply fields (characters). They apply to `backend: local` only; every other backend gets none of
them unless the user sets one (an explicit value always wins)."""


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
    cache: Literal["run", "condition", "off"] = "run"
    """`run` answers identical requests once per run directory, shared by all conditions (common
    random numbers: conditions that ask the same thing get the same reply); `condition` keeps one
    cache namespace per condition, so every condition sends its own requests, as the paper's
    isolated per-condition scripts did; `off` caches nothing."""
    max_string_chars: int | None = Field(default=None, ge=20)
    """`json_object` mode only: cap every free-text field of a reply at this many characters in the
    grammar, so a small model cannot loop inside a string until `max_tokens` cuts the JSON. Default
    240 for the embedded model (grammar-constrained decoding runs ~25 tokens/s on 2 cores), none
    elsewhere (OpenAI's strict schemas reject `maxLength`)."""
    context_window: int | None = Field(default=None, ge=512)
    """The model's context length in tokens. It bounds every agent's history (earlier positions go
    first; the question, critiques and briefs never) and is what the embedded server is started
    with. Default 8192 for `local`; unbounded elsewhere unless set here."""
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

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        # `localhost:8000/v1` (no scheme) is a common slip; the HTTP client would fail on every call.
        if v is not None and not re.match(r"https?://[^/\s]+", v):
            raise ValueError(f"base_url {v!r} is not an http(s) URL. Write it like http://localhost:8000/v1")
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

    def accommodation(self, name: str, explicit: int | None = None) -> int | None:
        """A small-model limit in force: the user's value, else the embedded backend's, else none."""
        if explicit is not None:
            return explicit
        return LOCAL_ACCOMMODATIONS[name] if self.backend == "local" else None

    @property
    def string_cap(self) -> int | None:
        return self.accommodation("max_string_chars", self.max_string_chars)

    @property
    def context_limit(self) -> int | None:
        return self.accommodation("context_window", self.context_window)

    def accommodations(self, settings: dict[str, Any], *, verifier: bool = False) -> dict[str, Any]:
        """The limits a run works under, for run.json and the report header. `settings` are the
        pipeline's (`passage_chars`, `verifier_passage_chars` when the run uses CLEAR's verifier)."""
        out: dict[str, Any] = {
            "backend": self.backend,
            "context_window": self.context_limit,
            "passage_chars": self.accommodation("passage_chars", settings.get("passage_chars")),
            # The grammar cap exists only in json_object mode; in any other mode nothing is capped.
            "max_string_chars": self.string_cap if self.mode == "json_object" else None,
        }
        if verifier:
            out["verifier_passage_chars"] = self.accommodation("verifier_passage_chars",
                                                               settings.get("verifier_passage_chars"))
        return out

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
    return openai.DefaultAsyncHttpxClient(verify=_ssl_context(), timeout=spec.timeout_s)


def preload(spec: ModelSpec) -> None:
    """Import now what the HTTP client imports lazily on its first request.

    The transport, openai's resources and the JSON parser are ~0.3 s of imports; left lazy they
    land inside the first question's recorded latency and skew latency figures. A runner calls
    this during start-up.
    """
    if spec.backend == "scripted":
        return
    import importlib

    for name in ("openai.resources.chat", "openai.pagination", "h11", "anyio._backends._asyncio", "jiter"):
        importlib.import_module(name)
    _http_client(spec)  # builds (never opens) a transport: imports httpcore and the TLS helpers


def _model_info(spec: ModelSpec) -> ModelInfo:
    return ModelInfo(vision=False, function_calling=False, json_output=True, family=spec.family,
                     structured_output=True)


def build_client(spec: ModelSpec, *, base_url: str | None = None) -> ChatCompletionClient:
    """Build the raw client for one trial. `base_url` overrides the spec (the local server's URL)."""
    if spec.backend == "scripted":
        from medpanel.agents.model.scripted import ScriptedChatCompletionClient

        return ScriptedChatCompletionClient(latency_ms=spec.latency_ms)
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
        register_secret(key)  # masked wherever an endpoint echoes it back (see agents/redact.py)
    sdk_args: dict[str, Any] = dict(api_key=key, timeout=spec.timeout_s, http_client=_http_client(spec),
                                    max_retries=0)  # medpanel retries with its own backoff, recording each try
    create_args: dict[str, Any] = dict(model=spec.model_name, temperature=spec.temperature, max_tokens=spec.max_tokens)
    if spec.seed is not None:
        create_args["seed"] = spec.seed
    sdk: Any
    if spec.backend == "azure":
        if not url:
            raise BackendError("model.base_url: Azure needs the endpoint URL. "
                               "Set model.base_url to https://<name>.openai.azure.com")
        sdk = openai.AsyncAzureOpenAI(azure_endpoint=url, azure_deployment=spec.model_name,
                                      api_version=spec.api_version or "2024-10-21", **sdk_args)
    else:
        sdk = openai.AsyncOpenAI(base_url=url, **sdk_args) if url else openai.AsyncOpenAI(**sdk_args)
    # Non-OpenAI names (vLLM, Ollama, llama.cpp, Azure deployments) need model_info; OpenAI's own
    # names are known to AutoGen.
    info = _model_info(spec) if spec.backend in ("local", "azure") or url else None
    return BaseOpenAIChatCompletionClient(client=PostedChat(sdk), create_args=create_args,  # type: ignore[arg-type]
                                          model_info=info)


class PostedChat:
    """`client.chat.completions.create` for AutoGen's OpenAI client, sent with the SDK's `post`.

    The SDK's own `create` first walks every request through its TypedDict transform: about 2 ms
    of CPU for a two-message request and 0.4 ms more per message (9 ms at 20 messages; measure
    with `python -m benchmarks.bench_perf --sdk`). Worker threads share one
    interpreter lock, so in a long panel debate that walk, not the model, bounds throughput.
    AutoGen already hands over JSON-ready dicts, so the body is posted as it is; the SDK still does
    the URL (Azure deployments included), auth, timeout, error types and response parsing.
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
        body = {k: v for k, v in params.items() if not isinstance(v, openai.NotGiven)} | dict(extra_body or {})
        options: dict[str, Any] = {}
        if not isinstance(timeout, openai.NotGiven):
            options["timeout"] = timeout
        if extra_headers:
            options["headers"] = dict(extra_headers)
        return await self.sdk.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                   options=options)  # type: ignore[arg-type]

    async def close(self) -> None:
        await self.sdk.close()
