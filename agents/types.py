"""The debate's own data model: questions, conditions, transcript events and results.

These types live in `agents` because pipelines produce them; `experiments` loads questions into
them and stores results from them, and nothing here imports upward.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from medpanel.agents.events import Act

Flags = dict[str, int | str]


class Question(BaseModel):
    """One benchmark item, already stripped of every field that reveals the answer."""

    model_config = ConfigDict(frozen=True)

    dataset: str
    """Sub-dataset name, e.g. `medqa`. With `qid` it is the item's identity."""
    qid: str
    """The item's id inside its dataset (MedAgentsBench `realidx`, normalised to str)."""
    text: str
    """The stem as the agents see it."""
    options: dict[str, str]
    """Letter -> option text, in letter order. Valid answers are exactly these keys."""
    gold: tuple[str, ...]
    """Gold letters. One for ordinary MCQ; several for multi-answer sets (scored as an exact set)."""
    multi_answer: bool = False
    """True when the item expects a set of letters (NEJM-QA style)."""

    @property
    def letters(self) -> list[str]:
        return list(self.options)

    @property
    def key(self) -> str:
        return f"{self.dataset}__{self.qid}"


class Condition(BaseModel):
    """One cell of a scenario's flag grid: a pipeline plus its flags and settings."""

    model_config = ConfigDict(frozen=True)

    slug: str
    """Stable name used in tables, transcript paths and the store (`c1r0k0`, `c1r1k1-ind`)."""
    pipeline: str
    flags: Flags = Field(default_factory=dict)
    settings: dict[str, object] = Field(default_factory=dict)
    """Pipeline settings (rounds, turns, limits ...), validated by the pipeline itself."""

    def flag(self, name: str, default: int | str = 0) -> int | str:
        return self.flags.get(name, default)

    def on(self, name: str) -> bool:
        return flag_on(self.flags, name)


def flag_on(flags: Flags, name: str) -> bool:
    """True when a 0/1 flag is set; string flags count as set when non-empty."""
    value = flags.get(name, 0)
    return bool(int(value)) if isinstance(value, int) or str(value).isdigit() else bool(value)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens the endpoint served from its prompt cache (`usage.prompt_tokens_details`); part of
    `prompt_tokens`, priced at the model's `cached_input` rate."""

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


EventKind = Literal["call", "note", "vote", "decision", "error"]


class TranscriptEvent(BaseModel):
    """One step of a debate: a model call, or a decision the pipeline made without a call."""

    kind: EventKind
    role: str
    """The part played: specialist, challenger, recruiter, moderator, generalist ..."""
    agent: str
    """The agent's name (two agents can share a role)."""
    round: int = 0
    turn: int = 0
    step: str = ""
    """What this call was for: `initial`, `critique`, `reconsider`, `recruit_check` ..."""
    messages: list[dict[str, object]] = Field(default_factory=list)
    """The messages sent, in OpenAI format (system prompt included)."""
    content: str = ""
    """The raw reply (or the note's text)."""
    parsed: dict[str, object] | None = None
    """The validated structured fields, or None when the reply did not parse."""
    invalid: bool = False
    """True when the reply still did not validate after the re-ask."""
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str = ""
    cache_hit: bool = False
    attempts: int = 1
    """Model calls behind this event (a re-ask or a retried transport error adds one)."""
    error: str | None = None
    data: dict[str, object] = Field(default_factory=dict)
    """Anything else the step records (votes, recruited roles, routes ...): the method's own."""
    act: Act | None = None
    """What the event is in the debate, typed (`agents.events`): what the analysis reads."""
    t: float = Field(default_factory=time.time)
    """Epoch seconds when the event was recorded; a call's is when its reply came back, so it ran
    from `t - latency_s` (transcripts written before this rule hold the time the call was made)."""


class QuestionResult(BaseModel):
    """What a pipeline returns for one (condition, question)."""

    condition: str
    dataset: str
    qid: str
    answer: tuple[str, ...] = ()
    """Final letters; empty only when the answer is invalid or the question errored."""
    gold: tuple[str, ...]
    correct: bool = False
    invalid: bool = False
    error: str | None = None
    error_kind: str | None = None
    events: list[TranscriptEvent] = Field(default_factory=list)
    summary: dict[str, object] = Field(default_factory=dict)
    """Pipeline-level facts the report aggregates (recruitments, final panel size, gate fired ...):
    the pipeline's `Summary.data()`."""
    summary_version: int = 1
    """The format version of that summary (its pipeline's `Summary.FORMAT_VERSION`); stored with it."""
    repeat: int = 0

    @property
    def calls(self) -> int:
        """Model calls actually sent (cache hits excluded)."""
        return sum(e.attempts for e in self.events if e.kind == "call" and not e.cache_hit)

    @property
    def logical_calls(self) -> int:
        """Model calls the pipeline asked for, cache hits included."""
        return sum(e.attempts for e in self.events if e.kind == "call")

    @property
    def tokens(self) -> int:
        return sum(e.usage.total for e in self.events if e.kind == "call" and not e.cache_hit)

    @property
    def latency_s(self) -> float:
        return sum(e.latency_s for e in self.events if e.kind == "call")

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens of the calls sent that the endpoint's prompt cache served."""
        return sum(e.usage.cached_tokens for e in self.events if e.kind == "call" and not e.cache_hit)


def score(answer: tuple[str, ...] | list[str], gold: tuple[str, ...] | list[str], mode: str = "exact_set") -> bool:
    """Score letters against gold.

    `exact_set` (the default, as in the CLEAR paper) needs the same set of letters; `any_of` (the
    CLEAR authors' code) accepts any overlap. For single-answer items both agree.
    """
    a, g = set(answer), set(gold)
    if not a:
        return False
    if mode == "exact_set":
        return a == g
    if mode == "any_of":
        return bool(a & g)
    raise ValueError(f"unknown scoring mode {mode!r}; use exact_set or any_of")
