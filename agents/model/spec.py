"""The `model:` block of a scenario (`ModelSpec`), and the embedded model's accommodations.

Plain settings: nothing here talks to a model, so every layer may import it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
    """Sampling temperature of every call; the papers' protocol is 0."""
    seed: int | None = 42
    """Sampling seed sent with every call (the papers' 42); repeats use seed, seed + 1, ..."""
    max_tokens: int = Field(default=512, ge=16)
    """The reply cap of one call, in tokens."""
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
    local_server: Literal["llama-server", "llama-cpp-python"] = "llama-server"
    """`local` only: the program that serves the embedded model (agents/model/embedded.py)."""
    local_parallel: int = Field(default=4, ge=1, le=64)
    """`local` with `llama-server`: requests decoded at once (`--parallel`), each with the full context."""

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
