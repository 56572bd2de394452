"""What an OpenAI-compatible endpoint said when it refused a request.

The openai SDK's text for a refused request is `Error code: 400 - {...}`, the whole error body as
a Python dict. vLLM, llama-server, OpenAI and Azure all put a readable `message` (and a `type`) in
that body; the SDK keeps the body, unwrapped from `{"error": {...}}` when it comes wrapped, as
`exc.body`. A prompt over the model's context is a 400 like any other, but it names a fact of the
question (its prompt is too long for this model) rather than of the call, so it gets its own kind.
"""

from __future__ import annotations

import sys
import urllib.parse
from types import ModuleType

CONTEXT_MARKERS = (
    "maximum context length",  # vLLM, OpenAI: "This model's maximum context length is N tokens"
    "context_length_exceeded",  # OpenAI's and Azure's error code
    "exceed_context_size_error",  # llama-server's error type
    "exceeds the available context size",  # llama-server's message
)


def loaded(name: str) -> ModuleType | None:
    """The module `name` if this process has imported it, else None (then none of its exceptions
    exists): how errors are classified without importing the openai SDK (half a second) on a run
    whose calls never raised one of its errors."""
    return sys.modules.get(name)


def _body(exc: BaseException) -> dict[str, object] | None:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]  # a body the SDK did not unwrap
    return body if isinstance(body, dict) else None


def where(location: str) -> str:
    """A redirect's target as it may be shown: scheme, host, port and path (no credentials or query)."""
    try:
        parts = urllib.parse.urlsplit(location.strip())
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "an unreadable location"
    if not parts.scheme or not parts.hostname:
        return f"the path {parts.path[:120]!r}" if parts.path else "no location"
    return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"[:200]


def endpoint_message(exc: BaseException) -> str | None:
    """`HTTP 400 BadRequestError: <the endpoint's message>`, or None when the body has no message;
    for a redirect, where it pointed (it is never followed: the request carries the prompts)."""
    openai = loaded("openai")
    if openai is None or not isinstance(exc, openai.APIStatusError):
        return None
    if 300 <= exc.status_code < 400:
        target = where(exc.response.headers.get("location", ""))
        return (f"HTTP {exc.status_code} redirect to {target} not followed: the request carries the prompts, "
                "so medpanel follows no redirect. Point model.base_url at the endpoint itself")
    body = _body(exc)
    message = body.get("message") if body else None
    if not isinstance(message, str) or not message.strip():
        return None
    kind = body.get("type") if body else None
    return f"HTTP {exc.status_code}{f' {kind}' if isinstance(kind, str) and kind else ''}: {message.strip()}"


def is_context_overflow(exc: BaseException) -> bool:
    """A 400 that says the prompt (plus `max_tokens`) is over the model's context length."""
    openai = loaded("openai")
    if openai is None or not isinstance(exc, openai.BadRequestError):
        return False
    body = _body(exc) or {}
    said = " ".join(str(body.get(k) or "") for k in ("message", "type", "code")) + " " + str(exc)
    return any(marker in said.lower() for marker in CONTEXT_MARKERS)
