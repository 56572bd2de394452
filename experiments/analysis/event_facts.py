"""One transcript event as the analysis reads it: typed, without the messages it sent.

A transcript file is JSON written from `TranscriptRecord`; the report reads tens of thousands of
them, so instead of validating each whole document into pydantic models (messages included, four
fifths of the bytes, read by no table) every event is read once into an `EventFacts`: the fields the
trajectories, the cost ledger and the CLEAR tables use, each coerced as the record declares it.
A field of the wrong type is a `BadField` naming it (`events.3.round`), which the reader turns into
the one-line error of a damaged transcript. The event's `act` is the typed one (`agents.events`;
an event of an older file that has none gets it from `run.records_v1`, as the record does): the trajectories
read the debate from it alone. `parsed` and `data` stay the JSON objects they are: their keys are
each pipeline's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import Required, TypedDict

from medpanel.agents.events import Act
from medpanel.agents.types import EventKind
from medpanel.experiments.analysis.quick_init import quick_init
from medpanel.experiments.run.store.records_v1 import old_act

KINDS: frozenset[str] = frozenset(get_args(EventKind))
"""`agents.types.EventKind`: an event of any other kind is a damaged transcript."""
_EMPTY: Mapping[str, object] = {}
ACT: TypeAdapter[Act] = TypeAdapter(Act)
CURRENT = 3
"""The transcript format whose events carry all their acts (`run.records.TRANSCRIPT_FORMAT`)."""


@with_config(ConfigDict(extra="ignore"))  # its own: a nested TypedDict takes its parent's otherwise
class UsageFields(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int


@with_config(ConfigDict(extra="ignore"))
class EventFields(TypedDict, total=False):
    """A transcript event's fields the report reads (`agents.types.TranscriptEvent`; its `messages`,
    `latency_s`, `invalid` and `t`, and any key the record lacks, are skipped unread: `medpanel show`
    and the API validate whole events)."""

    kind: Required[EventKind]
    role: str
    agent: str
    round: int
    turn: int
    step: str
    content: str
    parsed: dict[str, object] | None
    usage: UsageFields
    model: str
    cache_hit: bool
    attempts: int
    error: str | None
    data: dict[str, object]
    act: Act | None


@with_config(ConfigDict(extra="forbid"))
class QuestionFields(TypedDict, total=False):
    """A transcript's `question` (`QuestionRecord`: a key it lacks is a damaged or foreign file)."""

    dataset: Required[str]
    qid: Required[str]
    text: Required[str]
    options: Required[dict[str, str]]
    gold: Required[list[str]]
    multi_answer: bool


@with_config(ConfigDict(extra="forbid"))
class TranscriptFields(TypedDict, total=False):
    """A transcript file (`TranscriptRecord`, whose keys it forbids others than), each event with
    only the fields the report reads."""

    format_version: int
    condition: Required[str]
    question: Required[QuestionFields]
    repeat: int
    answer: list[str]
    gold: list[str]
    correct: bool
    invalid: bool
    error: str | None
    error_kind: str | None
    calls: int
    logical_calls: int
    tokens: int
    latency_s: float
    cost_usd: float
    cached_tokens: int
    cache_saved_usd: float
    summary: dict[str, object]
    events: list[EventFields]


TRANSCRIPT_FIELDS: TypeAdapter[TranscriptFields] = TypeAdapter(TranscriptFields)
"""Checks a transcript's JSON against `TranscriptFields` in pydantic's core: what is not read
(the messages, four fifths of the bytes) is never made a Python object, and what is read comes out
with the types declared (twice as fast as decoding the whole document)."""


def _old_act(e: Mapping[str, Any], version: int) -> Act | None:
    """The act of an event of an older file: read from its names (format 2: CLEAR's, which no
    format-2 writer set; any other act the file's own)."""
    act = old_act(e, version)
    return act if act is not None or version < 2 else e.get("act")


def facts_of(events: list[EventFields], version: int = CURRENT) -> list[EventFacts]:
    """Events checked by `TRANSCRIPT_FIELDS` as typed facts (their types are known: no coercion);
    `version`: the file's format (an older one's missing acts are read from its step names)."""
    out = []
    old = version < CURRENT
    for e in events:
        step = e.get("step", "")
        usage = e.get("usage") or {}
        parsed = e.get("parsed")
        out.append(EventFacts(e["kind"], e.get("role", ""), e.get("agent", ""), e.get("round", 0),
                              e.get("turn", 0), step, step.partition(":")[0], e.get("content", ""), parsed,
                              e.get("data") or _EMPTY, usage.get("prompt_tokens", 0),
                              usage.get("completion_tokens", 0), e.get("model", ""), e.get("cache_hit", False),
                              e.get("attempts", 1), e.get("error"), _old_act(e, version) if old else e.get("act")))
    return out


class BadField(ValueError):
    """A transcript field that is not what the record declares (`where`: its dotted path)."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where


@quick_init  # one per transcript event: 150,000 on a full-protocol report
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
    parsed: Mapping[str, object] | None
    """The validated reply fields (None when the reply did not parse, or a note)."""
    data: Mapping[str, Any]
    prompt_tokens: int
    completion_tokens: int
    model: str
    cache_hit: bool
    attempts: int
    error: str | None
    act: Act | None = None
    """What the event is in the debate (`agents.events`): what the trajectories read."""


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


def _str(e: Mapping[str, object], key: str) -> str:
    v = e.get(key)
    return v if type(v) is str else "" if v is None else str(v)


def event_facts(e: Any, n: int, version: int = CURRENT) -> EventFacts:
    """Event `n` of a transcript's `events` as its typed facts (missing fields take the record's
    defaults); `version`: the file's format (before 3, an act no writer of that format set is read
    from the step's name)."""
    facts = _facts(e, n)
    if version < CURRENT and ((act := old_act(e, version)) is not None or version < 2):
        return dataclasses.replace(facts, act=act)
    raw = e.get("act")
    if raw is None:
        return facts
    try:
        return dataclasses.replace(facts, act=ACT.validate_python(raw))
    except ValidationError as exc:
        raise BadField(f"events.{n}.act", f"an act of agents.events ({exc.errors()[0]['msg']})") from None


def _facts(e: object, n: int) -> EventFacts:
    if type(e) is dict:
        # The fast path: a report reads every event of a run (150,000 on a full-protocol one), and
        # an event as the runner wrote it has every field of its declared type already.
        get = e.get
        kind, role, agent, step, content = get("kind"), get("role", ""), get("agent", ""), get("step", ""), \
            get("content", "")
        rnd, turn, attempts, usage, data = get("round", 0), get("turn", 0), get("attempts", 1), get("usage"), \
            get("data")
        if (kind in KINDS and type(role) is str and type(agent) is str and type(step) is str
                and type(content) is str and type(rnd) is int and type(turn) is int and type(attempts) is int
                and type(usage) is dict and type(data) is dict):
            parsed, model, error = get("parsed"), get("model", ""), get("error")
            pt, ct = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
            if type(pt) is int and type(ct) is int and type(model) is str and (error is None or type(error) is str):
                return EventFacts(kind, role, agent, rnd, turn, step, step.partition(":")[0], content,
                                  parsed if type(parsed) is dict else None, data, pt, ct, model,
                                  bool(get("cache_hit", False)), attempts, error)
    return _coerced(e, n)


def _coerced(e: object, n: int) -> EventFacts:
    """`event_facts` of an event with a field missing or of another type: coerced as the readers
    always did (`str(step)`), or a `BadField` when it cannot be."""
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
        turn=_int(e, "turn", where, 0), step=step, base=step.partition(":")[0], content=_str(e, "content"),
        parsed=parsed if isinstance(parsed, Mapping) else None, data=data,
        prompt_tokens=_int(usage, "prompt_tokens", f"{where}.usage", 0),
        completion_tokens=_int(usage, "completion_tokens", f"{where}.usage", 0), model=_str(e, "model"),
        cache_hit=bool(e.get("cache_hit", False)), attempts=_int(e, "attempts", where, 1),
        error=None if error is None else str(error))


def events_of(raw: object, version: int = CURRENT) -> list[EventFacts]:
    """A transcript's `events` list as typed facts, in order (`version`: the file's format)."""
    if raw is None:
        return []
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise BadField("events", "a list")
    return [event_facts(e, n, version) for n, e in enumerate(raw)]


def version_of(doc: Mapping[str, object]) -> int:
    """A transcript document's format (0: written before formats had numbers)."""
    v = doc.get("format_version", 0)
    return v if type(v) is int else 0
