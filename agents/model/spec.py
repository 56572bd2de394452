"""The `model:` block of a scenario (`ModelSpec`), and the embedded model's accommodations.

Plain settings: nothing here talks to a model, so every layer may import it.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from medpanel.agents.model.reply_bounds import DEFAULT_MAX_REPLY_BYTES
from medpanel.agents.redact import redact

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


def url_problem(url: str) -> str | None:
    """Why an endpoint URL cannot be used (a space, a broken IPv6 host, a port out of range), else None."""
    if any(c.isspace() for c in url) or any(ord(c) < 32 for c in url):
        return "contains a space or a control character"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises for a port that is not a number or is over 65535
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if not parts.hostname:
        return "has no host name"
    if port == 0:
        return "has port 0"
    return None


class BatchSpec(BaseModel):
    """`model.batch`: send the calls of the questions in flight as batch files (OpenAI's Batch API)
    instead of one request each: half the price, its own quota, replies within the completion window."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = False
    """Send every call of this model as a line of a batch file (backend `openai`: an endpoint that
    serves OpenAI's `/files` and `/batches`); the calls are priced at the batch price."""
    max_wait_s: float = Field(default=10.0, gt=0, le=86400)
    """A batch goes out this long after its first request came, unless it is full before."""
    max_requests: int = Field(default=1000, ge=1, le=50_000)
    """A batch goes out once it holds this many requests (OpenAI takes at most 50,000 a file)."""
    poll_s: float = Field(default=30.0, gt=0, le=3600)
    """How often a submitted batch's status is asked for."""
    completion_window: Literal["24h"] = "24h"
    """The window the endpoint is given (the Batch API accepts `24h` only)."""


class ModelSpec(BaseModel):
    """The `model:` block of a scenario."""

    # Every number is finite and bounded: `.inf` would be stored as null and break what reads it back.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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
    """Sampling temperature of every call; the papers' protocol is 0."""
    seed: int | None = Field(default=42, ge=-(2**63), le=2**63 - 1, strict=True)
    """Sampling seed sent with every call (the papers' 42); repeats use seed, seed + 1, ..."""
    max_tokens: int = Field(default=512, ge=16, le=10_000_000)
    """The reply cap of one call, in tokens."""
    structured_output: str = "auto"
    """How answers are constrained: `json_schema` (OpenAI, vLLM), `json_object` (+ schema, what
    llama.cpp's server accepts), `prompt` (instructions + validate + one re-ask). `auto` picks by
    backend."""
    timeout_s: float = Field(default=120.0, gt=0, le=86400)
    """Per-call timeout: the whole reply, its body included, must have come within it."""
    max_reply_bytes: int = Field(default=DEFAULT_MAX_REPLY_BYTES, ge=4096, le=2**30)
    """The largest reply body read from the endpoint, decompressed; a longer one is refused (retried,
    then an error row) before the rest is read or inflated (docs/security.md)."""
    max_retries: int = Field(default=4, ge=0, le=100)
    """Retries of a failing call (429, 5xx, timeouts, dropped connections) with backoff."""
    cache: Literal["run", "condition", "off"] = "run"
    """`run` answers identical requests once per run directory, shared by all conditions (common
    random numbers: conditions that ask the same thing get the same reply); `condition` keeps one
    cache namespace per condition, so every condition sends its own requests, as the paper's
    isolated per-condition scripts did; `off` caches nothing."""
    max_string_chars: int | None = Field(default=None, ge=20, le=10_000_000)
    """`json_object` mode only: cap every free-text field of a reply at this many characters in the
    grammar, so a small model cannot loop inside a string until `max_tokens` cuts the JSON. Default
    240 for the embedded model (grammar-constrained decoding runs ~25 tokens/s on 2 cores), none
    elsewhere (OpenAI's strict schemas reject `maxLength`)."""
    context_window: int | None = Field(default=None, ge=512, le=100_000_000)
    """The model's context length in tokens. It bounds every agent's history (earlier positions go
    first; the question, critiques and briefs never) and is what the embedded server is started
    with. Default 8192 for `local`; unbounded elsewhere unless set here."""
    family: str = "unknown"
    """AutoGen model family, for names AutoGen does not know."""
    latency_ms: float = Field(default=0.0, ge=0, le=3_600_000)
    """`scripted` only: a fixed latency per call, for benchmarks."""
    local_server: Literal["llama-server", "llama-cpp-python"] = "llama-server"
    """`local` only: the program that serves the embedded model (agents/model/embedded.py)."""
    local_parallel: int = Field(default=4, ge=1, le=64)
    """`local` with `llama-server`: requests decoded at once (`--parallel`), each with the full context."""
    local_servers: int | None = Field(default=None, ge=1, le=64)
    """`local` with `llama-server`: how many server processes share `local_parallel` (agents/model/cores.py).
    Default min(local_parallel, max(4, cores)), each with one thread; 1 is the single server."""
    local_threads: int | None = Field(default=None, ge=1, le=256)
    """`local` with `llama-server`: compute threads of each server. Default 1 (with 4 servers on up to
    8 cores), so no server's threads wait for each other on a shared core."""
    batch: BatchSpec = Field(default_factory=BatchSpec)
    """`openai` only: send calls through the endpoint's Batch API (agents/model/batching.py)."""

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        if v not in BACKENDS:
            raise ValueError(f"unknown backend {v!r}; use one of {', '.join(BACKENDS)}")
        return v

    @model_validator(mode="after")
    def _servers_for_slots(self) -> ModelSpec:
        # More processes than requests decoded at once: some would never get one.
        if self.local_servers is not None and self.local_servers > self.local_parallel:
            raise ValueError(f"local_servers ({self.local_servers}) is more than local_parallel "
                             f"({self.local_parallel}): a server with no request to decode only holds memory. "
                             f"Set local_servers <= {self.local_parallel} or raise local_parallel")
        if self.local_server == "llama-cpp-python" and (self.local_servers or self.local_threads):
            raise ValueError("local_servers and local_threads apply to llama-server only. Remove them or set "
                             "local_server: llama-server")
        return self

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        # `localhost:8000/v1` (no scheme) is a common slip; the HTTP client would fail on every call.
        if v is not None and not re.match(r"https?://[^/\s]+", v):
            raise ValueError(f"base_url {v!r} is not an http(s) URL. Write it like http://localhost:8000/v1")
        if v is not None:
            why = url_problem(v)
            if why:
                raise ValueError(f"base_url {redact(v)!r} {why}. Write it like http://localhost:8000/v1")
        return v

    @field_validator("cache", mode="before")
    @classmethod
    def _bare_off(cls, v: object) -> object:
        # YAML 1.1 reads a bare `cache: off` as false: that is what the user wrote, so it means "off".
        return "off" if v is False else v

    @field_validator("structured_output")
    @classmethod
    def _known_mode(cls, v: str) -> str:
        if v not in STRUCTURED_MODES:
            raise ValueError(f"unknown structured_output {v!r}; use one of {', '.join(STRUCTURED_MODES)}")
        return v

    @model_validator(mode="after")
    def _batch_backend(self) -> ModelSpec:
        if self.batch.enabled and self.backend != "openai":
            raise ValueError(f"batch.enabled needs backend openai (an OpenAI-compatible Batch API), not "
                             f"{self.backend!r}. Set model.backend: openai or model.batch.enabled: false")
        return self

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

    def accommodations(self, settings: dict[str, object], *, verifier: bool = False) -> dict[str, object]:
        """The limits a run works under, for run.json and the report header. `settings` are the
        pipeline's (`passage_chars`, `verifier_passage_chars` when the run uses CLEAR's verifier)."""
        out: dict[str, object] = {
            "backend": self.backend,
            "context_window": self.context_limit,
            "passage_chars": self.accommodation("passage_chars", cast("int | None", settings.get("passage_chars"))),
            # The grammar cap exists only in json_object mode; in any other mode nothing is capped.
            "max_string_chars": self.string_cap if self.mode == "json_object" else None,
        }
        if verifier:
            chars = cast("int | None", settings.get("verifier_passage_chars"))
            out["verifier_passage_chars"] = self.accommodation("verifier_passage_chars", chars)
        return out

    @property
    def mode(self) -> str:
        """The structured-output mode actually used."""
        if self.structured_output != "auto":
            return self.structured_output
        # llama.cpp's server rejects `json_schema` but grammar-constrains `json_object` + schema.
        return {"local": "json_object", "scripted": "json_schema"}.get(self.backend, "json_schema")


def key_env(spec: ModelSpec) -> str:
    return spec.api_key_env or ("AZURE_OPENAI_API_KEY" if spec.backend == "azure" else "OPENAI_API_KEY")


def is_local_url(url: str | None) -> bool:
    """An endpoint on this machine (vLLM, Ollama, llama.cpp): it needs no key."""
    host = (urllib.parse.urlsplit(url).hostname or "") if url else ""
    return host in ("127.0.0.1", "localhost", "::1")


def credential_problem(spec: ModelSpec, base_url: str | None = None) -> str | None:
    """Why a client for `spec` cannot be built (its key variable unset, Azure without a URL), else None.
    Checked before a run creates anything, and again where each client is built."""
    if spec.backend in ("local", "scripted"):
        return None
    url = base_url or spec.base_url
    if spec.backend == "azure" and not url:
        return "model.base_url: Azure needs the endpoint URL. Set model.base_url to https://<name>.openai.azure.com"
    env = key_env(spec)
    if not os.environ.get(env) and not is_local_url(url):
        return f"model.api_key_env: environment variable {env} is not set. Export your key as {env}"
    return None
