"""The typed, versioned records a run writes: run.json (`RunRecord`) and each transcript file
(`TranscriptRecord`); a result row's summary carries its pipeline's `Summary.FORMAT_VERSION`.

Every record has a `format_version`. Files written before versions existed (format 0) have none,
and read as 0. Format 1 only added fields (`format_version`, run.json's `run_id`, `plan` and
`tracker`, a transcript's `cached_tokens` and `cache_saved_usd`), each declared below with the value
a format-0 file means by leaving it out, so one model reads both formats and there is nothing to
convert (tests/test_old_runs.py opens a run made by that code). Transcript format 2 adds each
event's typed `act`, and format 3 CLEAR's acts; an older file's events get theirs from their step
names as they are read (`records_v1`, the one module that still knows those names). A key neither format has (a
misspelling, another program's field) is refused, naming the key: `extra="forbid"` throughout. A
format that renames or reshapes a field goes up a version and brings its conversion here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medpanel.agents.types import Condition, Question, QuestionResult, TranscriptEvent
from medpanel.experiments.run.store.records_v1 import upgrade_events

RUN_FORMAT = 1
"""run.json: 1 adds `format_version`, `run_id`, `tracker` and the `plan` block (the pipeline's settings and plans)."""
TRANSCRIPT_FORMAT = 3
"""A transcript file: 1 adds `format_version` and the prompt-cache counts, and its summary carries the
summary's own version; 2 adds each event's typed `act` (`agents.events`), which `records_v1` gives
the events of an older file as it is read; 3 adds CLEAR's acts (`PathwayAnswer`, `Verdict`,
`FollowUpSearch`, `Ruling`), which a format-2 file's CLEAR events get the same way."""
PLAN_FORMAT = 1
"""The version of run.json's `plan` block."""

_STRICT = ConfigDict(extra="forbid")


class ConditionRecord(Condition):
    """One of run.json's `conditions`: the scenario's condition as it was planned."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class QuestionRecord(Question):
    """A transcript's `question`: the question as the agents saw it (a free-text task has no options
    and no gold)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class PlanRecord(BaseModel):
    """run.json's `plan` block (`ResolvedRun.record`): the pipeline as the scenario named it, its
    validated settings and each condition's decoded plan. The settings and plans are the pipeline's
    own models (`settings_model`, `plan_model`, subclasses of `PipelineSettings` and `ConditionPlan`),
    so they are stored as their JSON and read back by that pipeline (`ResolvedRun.from_record`):
    this record cannot know a plugin pipeline's fields."""

    model_config = _STRICT

    format_version: int = PLAN_FORMAT
    pipeline: str
    settings: dict[str, object]
    conditions: dict[str, dict[str, Any]]
    """Condition slug -> its `ConditionPlan` as JSON."""


class GitRecord(BaseModel):
    """run.json's `git` block: the medpanel checkout's commit and whether it was dirty (None: not a checkout)."""

    model_config = _STRICT

    commit: str | None = None
    dirty: bool | None = None


class ModelRecord(BaseModel):
    """run.json's `model` block: what answered (older runs lack `cache`)."""

    model_config = _STRICT

    backend: str | None = None
    name: str | None = None
    base_url: str | None = None
    mode: str | None = None
    temperature: float | None = None
    seed: int | None = None
    cache: str | None = None
    local_server: dict[str, object] | None = None
    """`local` only: the program that served the embedded model, its version and `parallel`."""


class RunRecord(BaseModel):
    """run.json: the resolved scenario, its conditions and plan, where the run is stored, where it came from."""

    model_config = _STRICT

    format_version: int = 0
    run_id: str | None = None
    """The id run.json shares with the study's copy of it (runs made before ids have none)."""
    name: str
    scenario_file: str | None = None
    scenario: dict[str, Any]
    """The scenario as validated (`Scenario.model_dump`), `run.storage` without a password."""
    conditions: list[ConditionRecord]
    n_questions: int | None = None
    repeats: int = 1
    n_pairs: int | None = None
    shard_size: int | None = None
    budget_reference: dict[str, object] | None = None
    storage: str | None = None
    model: ModelRecord = Field(default_factory=ModelRecord)
    accommodations: dict[str, object] | None = None
    plan: PlanRecord | None = None
    """The pipeline's validated settings and each condition's plan (`ResolvedRun.record`); runs made
    before format 1 have none and are planned again from `scenario` when they resume."""
    git: GitRecord = Field(default_factory=GitRecord)
    versions: dict[str, str] = Field(default_factory=dict)
    host: str | None = None
    created: str | None = None
    tracker: dict[str, str] | None = None
    """`run.tracker`'s run (`kind`, `run_id`), stored when it is opened, so a resume continues it."""

    @property
    def pipeline(self) -> str:
        return str(self.scenario.get("pipeline", "generalist"))

    @property
    def slugs(self) -> list[str]:
        return [c.slug for c in self.conditions]

    @property
    def flags(self) -> dict[str, dict[str, int | str]]:
        """Condition slug -> its flags."""
        return {c.slug: dict(c.flags) for c in self.conditions}

    # The scenario block is the validated `Scenario` as JSON (older runs' scenarios lack keys added
    # since): these read the parts the readers use, with the default the scenario itself has.
    def section(self, name: str) -> dict[str, Any]:
        """A block of the recorded scenario (`run`, `dataset`, ...); empty when the run's scenario has none."""
        value = self.scenario.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def named_pipeline(self) -> str | None:
        """The scenario's `pipeline` as recorded; None in a record that names none (a hand-built one)."""
        name = self.scenario.get("pipeline")
        return None if name is None else str(name)

    @property
    def compare(self) -> list[tuple[str, str]]:
        """The scenario's `compare` pairs (empty: the report picks the pairs that differ in one flag)."""
        return [(str(a), str(b)) for a, b in self.scenario.get("compare") or []]

    @property
    def models(self) -> list[dict[str, Any]]:
        """The scenario's `models:` axis (each model's block as recorded)."""
        return [m for m in self.scenario.get("models") or [] if isinstance(m, dict)]

    @property
    def cache_mode(self) -> str:
        """`model.cache` (run.json's model block; older runs only have it in the scenario)."""
        return str(self.model.cache or self.section("model").get("cache") or "run")

    @property
    def scoring(self) -> str:
        return str(self.section("dataset").get("scoring", "exact_set"))

    @property
    def prices(self) -> dict[str, Any]:
        """`run.prices`: model name -> its prices per million tokens."""
        return dict(self.section("run").get("prices") or {})

    @property
    def storage_url(self) -> str | None:
        """`run.storage` as recorded (without its password); None for the run's own SQLite file."""
        url = self.section("run").get("storage")
        return str(url) if url else None


class TranscriptRecord(BaseModel):
    """One (condition, question, repeat): the outcome, the counts, the summary and every event."""

    model_config = _STRICT

    format_version: int = 0
    condition: str
    question: QuestionRecord
    """The question as the agents saw it."""
    repeat: int = 0
    answer: list[str] = Field(default_factory=list)
    gold: list[str] = Field(default_factory=list)
    correct: bool = False
    invalid: bool = False
    error: str | None = None
    error_kind: str | None = None
    calls: int = 0
    logical_calls: int = 0
    tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    cached_tokens: int = 0
    """Prompt tokens the endpoint's prompt cache served, over the calls sent (format 0: not recorded)."""
    cache_saved_usd: float = 0.0
    summary: dict[str, Any] = Field(default_factory=dict)
    """The pipeline's summary (its `summary_model`, which checks it), with its own `format_version`
    since format 1."""
    events: list[TranscriptEvent] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _acts_of_old_events(cls, doc: object) -> object:
        """A file of format 2 or earlier: its events' acts, as `records_v1` reads them."""
        if isinstance(doc, dict):
            version = doc.get("format_version", 0)
            if isinstance(version, int) and version < TRANSCRIPT_FORMAT and "events" in doc:
                return {**doc, "events": upgrade_events(doc["events"], version)}
        return doc

    @classmethod
    def of(cls, result: QuestionResult, question: Question, cost_usd: float, *, cached_tokens: int = 0,
           cache_saved_usd: float = 0.0) -> TranscriptRecord:
        return cls(format_version=TRANSCRIPT_FORMAT, condition=result.condition,
                   question=QuestionRecord.model_validate(question.model_dump()), repeat=result.repeat,
                   answer=list(result.answer),
                   gold=list(result.gold), correct=result.correct, invalid=result.invalid, error=result.error,
                   error_kind=result.error_kind, calls=result.calls, logical_calls=result.logical_calls,
                   tokens=result.tokens, latency_s=result.latency_s, cost_usd=cost_usd,
                   cached_tokens=cached_tokens, cache_saved_usd=cache_saved_usd,
                   summary=summary_record(result), events=result.events)


def summary_record(result: QuestionResult) -> dict[str, object]:
    """A result's summary as rows and transcripts store it: its format version, then the facts."""
    return {"format_version": result.summary_version, **result.summary}


def read_run_record(doc: dict[str, object]) -> RunRecord:
    """run.json of format 0 or 1 (`load_record` refuses a newer one first)."""
    return RunRecord.model_validate(doc)


def read_transcript_record(doc: dict[str, object]) -> TranscriptRecord:
    """A transcript of format 0 to 3 (`load_transcript` refuses a newer one first); the events of
    an older one get their acts (`records_v1`)."""
    return TranscriptRecord.model_validate(doc)
