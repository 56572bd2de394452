"""One transcript event as the analysis reads it: typed, without the messages it sent.

A transcript file is JSON written from `TranscriptRecord`; the report reads tens of thousands of
them, so instead of validating each whole document into pydantic models (messages included, four
fifths of the bytes, read by no table) every event is read once into an `EventFacts`: the fields the
trajectories, the cost ledger and the CLEAR tables use, each coerced as the record declares it.
A field of the wrong type is a `BadField` naming it (`events.3.round`), which the reader turns into
the one-line error of a damaged transcript. `parsed` and `data` stay the JSON objects they are:
their keys are each pipeline's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KINDS = frozenset(("call", "note", "vote", "decision", "error"))
"""`agents.types.EventKind`: an event of any other kind is a damaged transcript."""
_EMPTY: Mapping[str, Any] = {}


class BadField(ValueError):
    """A transcript field that is not what the record declares (`where`: its dotted path)."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where


@dataclass(frozen=True, slots=True)
class EventFacts:
    kind: str
    role: str
    agent: str
    round: int
    turn: int
    step: str
    """The step as recorded (`turn`, `critique:2` ...); `base` is the part before a colon."""
    base: str
    content: str
    parsed: Mapping[str, Any] | None
    """The validated reply fields (None when the reply did not parse, or a note)."""
    data: Mapping[str, Any]
    prompt_tokens: int
    completion_tokens: int
    model: str
    cache_hit: bool
    attempts: int
    error: str | None


def _int(e: Mapping[str, Any], key: str, where: str, default: int) -> int:
    v = e.get(key, default)
    if type(v) is int:
        return v
    if v is None:
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        raise BadField(f"{where}.{key}", f"an integer, not {type(v).__name__}") from None


def _str(e: Mapping[str, Any], key: str) -> str:
    v = e.get(key)
    return v if type(v) is str else "" if v is None else str(v)


def event_facts(e: Any, n: int) -> EventFacts:
    """Event `n` of a transcript's `events` as its typed facts (missing fields take the record's defaults)."""
    where = f"events.{n}"
    if not isinstance(e, Mapping):
        raise BadField(where, "an object")
    kind = e.get("kind", "")
    if kind not in KINDS:
        raise BadField(f"{where}.kind", f"one of {', '.join(sorted(KINDS))}, not {kind!r}")
    parsed = e.get("parsed")
    data = e.get("data")
    if data is None:
        data = _EMPTY
    elif not isinstance(data, Mapping):
        raise BadField(f"{where}.data", "an object")
    usage = e.get("usage")
    if usage is None:
        usage = _EMPTY
    elif not isinstance(usage, Mapping):
        raise BadField(f"{where}.usage", "an object")
    step = _str(e, "step")
    error = e.get("error")
    return EventFacts(
        kind=kind, role=_str(e, "role"), agent=_str(e, "agent"), round=_int(e, "round", where, 0),
        turn=_int(e, "turn", where, 0), step=step, base=step.split(":")[0], content=_str(e, "content"),
        parsed=parsed if isinstance(parsed, Mapping) else None, data=data,
        prompt_tokens=_int(usage, "prompt_tokens", f"{where}.usage", 0),
        completion_tokens=_int(usage, "completion_tokens", f"{where}.usage", 0), model=_str(e, "model"),
        cache_hit=bool(e.get("cache_hit", False)), attempts=_int(e, "attempts", where, 1),
        error=None if error is None else str(error))


def events_of(raw: Any) -> list[EventFacts]:
    """A transcript's `events` list as typed facts, in order."""
    if raw is None:
        return []
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise BadField("events", "a list")
    return [event_facts(e, n) for n, e in enumerate(raw)]
