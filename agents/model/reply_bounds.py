"""What a model endpoint may send back: a bound on every size and figure its reply controls.

A broken or hostile OpenAI-compatible endpoint chooses how long its reply is and how far it inflates
(gzip), how deep its JSON nests, how many choices it lists, whether it is UTF-8 at all, and the usage
figures that go into budgets, the rate limiter and the result rows. None of them may damage a run:
the body is read, decompressed, under `model.max_reply_bytes`; its JSON is parsed only when it holds
at most `MAX_CONTAINERS` objects and arrays (a parser's memory grows with them, not with the bytes);
usage figures are whole numbers from 0 to `MAX_USAGE_TOKENS`. Each refusal is a `BadReply`, a
`ValueError`, so the call is retried as `bad_response` and, still refused, becomes an error row whose
text names the bound. Both HTTP paths (`lean_chat`, and the SDK's in `sdk_http` + `backends`) and
`RecordingClient` (every client's usage) read through these checks.
"""

from __future__ import annotations

import json
import math
from typing import Any

DEFAULT_MAX_REPLY_BYTES = 8 * 2**20
"""`model.max_reply_bytes`: a chat completion of 100,000 tokens is about half a megabyte of JSON."""

MAX_USAGE_TOKENS = 100_000_000
"""The largest usage figure one reply may report: the largest `model.context_window` accepted."""

MAX_CONTAINERS = 100_000
"""`{` and `[` characters a reply may hold (strings included, so the count is an upper bound on its
JSON objects and arrays): a well-formed completion holds a few dozen. Parsed, every small container
costs dozens of bytes, so a few megabytes of `[]` would cost hundreds."""

MAX_CHOICES = 16
"""medpanel asks for one choice (`n` is never sent); a reply listing more than this is refused."""


class BadReply(ValueError):
    """A reply refused for what the endpoint put in it (retried as `bad_response`)."""


class ReplyTooLarge(BadReply):
    """The reply, decompressed, is over `model.max_reply_bytes` or holds too many containers."""


def too_large(limit: int) -> ReplyTooLarge:
    return ReplyTooLarge(f"the endpoint's reply is over model.max_reply_bytes ({limit:,} bytes, decompressed); "
                         "it was not read further. Raise model.max_reply_bytes if replies this long are expected")


class ReplyMeter:
    """Counts a reply's decoded bytes and containers chunk by chunk; raises once a bound is passed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.containers = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise too_large(self.limit)
        self.containers += chunk.count(b"{") + chunk.count(b"[")
        if self.containers > MAX_CONTAINERS:
            raise ReplyTooLarge(f"the endpoint's reply holds more than {MAX_CONTAINERS:,} JSON objects or arrays "
                                "('{' or '['); a chat completion holds a few dozen")


def parse_json(raw: bytes) -> Any:
    """The reply's JSON, or None when it is not JSON; a `BadReply` when it is not UTF-8 or nests
    deeper than Python's parser recurses (which raises `RecursionError`, no `ValueError`)."""
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise BadReply("the endpoint's reply nests its JSON deeper than it can be read") from exc
    except UnicodeDecodeError as exc:
        raise BadReply("the endpoint's reply is not UTF-8 text") from exc
    except ValueError:
        return None


def usage_figure(value: object, name: str) -> int:
    """A usage figure as the int it must be: absent or null is 0 (some endpoints report none);
    negative, fractional, non-numeric or over `MAX_USAGE_TOKENS` is a `BadReply`."""
    if value is None:
        return 0
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    if number is None:
        raise BadReply(f"the endpoint's usage.{name} is {str(value)[:40]!r}, not a whole number of tokens")
    if not 0 <= number <= MAX_USAGE_TOKENS:
        raise BadReply(f"the endpoint's usage.{name} is {number:.3g}, outside 0 to {MAX_USAGE_TOKENS:,} tokens")
    return number


def checked_usage(prompt: object, completion: object, cached: object = 0) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt tokens), each a checked `usage_figure`."""
    return (usage_figure(prompt, "prompt_tokens"), usage_figure(completion, "completion_tokens"),
            usage_figure(cached, "prompt_tokens_details.cached_tokens"))


def stored_usage_ok(entry: dict[str, object]) -> bool:
    """A cached or replayed reply's usage is within bounds (an entry written before the bounds
    existed may hold an endpoint's absurd figure: it is then asked again, never stored)."""
    try:
        checked_usage(entry.get("prompt_tokens"), entry.get("completion_tokens"), entry.get("cached_tokens", 0))
    except BadReply:
        return False
    return True


def completion_choices(payload: object) -> list[dict[str, object]] | None:
    """The completion's `choices` when it has one to read, else None; a list longer than
    `MAX_CHOICES` is a `BadReply`."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        return None
    if len(choices) > MAX_CHOICES:
        raise BadReply(f"the endpoint's reply lists {len(choices):,} choices; medpanel asks for one "
                       f"and reads at most {MAX_CHOICES}")
    return choices


def usage_of(payload: dict[str, object]) -> tuple[int, int, int]:
    """A parsed completion's checked usage: (prompt, completion, cached prompt tokens)."""
    usage = payload.get("usage")
    if usage is None:
        return 0, 0, 0
    if not isinstance(usage, dict):
        raise BadReply(f"the endpoint's usage is {str(usage)[:40]!r}, not an object")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return checked_usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), cached)
