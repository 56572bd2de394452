"""The typed, versioned records a run writes: run.json (`RunRecord`) and each transcript file
(`TranscriptRecord`); a result row's summary carries its pipeline's `Summary.FORMAT_VERSION`.

Every record has a `format_version`. Files written before versions existed (format 0) have none,
and read as 0: readers accept them unchanged (tests/test_old_runs.py opens a run made by that
code). When a format changes, its version goes up and `_upgrade` turns older records into the
current shape, so every reader sees one shape.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from medpanel.agents.types import Question, QuestionResult, TranscriptEvent

RUN_FORMAT = 1
"""run.json: 1 adds `format_version` and the `plan` block (the pipeline's settings and plans)."""
TRANSCRIPT_FORMAT = 1
"""A transcript file: 1 adds `format_version`, and its summary carries the summary's own version."""


class ModelRecord(BaseModel):
    """run.json's `model` block: what answered (older runs lack `cache`)."""

    model_config = ConfigDict(extra="allow")

    backend: str | None = None
    name: str | None = None
    base_url: str | None = None
    mode: str | None = None
    temperature: float | None = None
    seed: int | None = None
    cache: str | None = None
    local_server: dict[str, Any] | None = None
    """`local` only: the program that served the embedded model, its version and `parallel`."""


class RunRecord(BaseModel):
    """run.json: the resolved scenario, its conditions and plan, where the run is stored, where it came from."""

    model_config = ConfigDict(extra="allow")

    format_version: int = 0
    run_id: str | None = None
    """The id run.json shares with the study's copy of it (runs made before ids have none)."""
    name: str
    scenario_file: str | None = None
    scenario: dict[str, Any]
    """The scenario as validated (`Scenario.model_dump`), `run.storage` without a password."""
    conditions: list[dict[str, Any]]
    n_questions: int | None = None
    repeats: int = 1
    n_pairs: int | None = None
    shard_size: int | None = None
    budget_reference: dict[str, Any] | None = None
    storage: str | None = None
    model: ModelRecord = Field(default_factory=ModelRecord)
    accommodations: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    """The pipeline's validated settings and each condition's plan (`ResolvedRun.record`); runs made
    before format 1 have none and are planned again from `scenario` when they resume."""
    git: dict[str, Any] = Field(default_factory=dict)
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
        return [str(c.get("slug", "")) for c in self.conditions]


class TranscriptRecord(BaseModel):
    """One (condition, question, repeat): the outcome, the counts, the summary and every event."""

    model_config = ConfigDict(extra="allow")

    format_version: int = 0
    condition: str
    question: dict[str, Any]
    """The question as the agents saw it (`Question.model_dump`; a gold-free free-text task has none)."""
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
    """Prompt tokens the endpoint's prompt cache served, over the calls sent."""
    cache_saved_usd: float = 0.0
    summary: dict[str, Any] = Field(default_factory=dict)
    """The pipeline's summary, with its own `format_version` since format 1."""
    events: list[TranscriptEvent] = Field(default_factory=list)

    @classmethod
    def of(cls, result: QuestionResult, question: Question, cost_usd: float) -> TranscriptRecord:
        return cls(format_version=TRANSCRIPT_FORMAT, condition=result.condition,
                   question=question.model_dump(mode="json"), repeat=result.repeat, answer=list(result.answer),
                   gold=list(result.gold), correct=result.correct, invalid=result.invalid, error=result.error,
                   error_kind=result.error_kind, calls=result.calls, logical_calls=result.logical_calls,
                   tokens=result.tokens, latency_s=result.latency_s, cost_usd=cost_usd,
                   summary=summary_record(result), events=result.events)


def summary_record(result: QuestionResult) -> dict[str, Any]:
    """A result's summary as rows and transcripts store it: its format version, then the facts."""
    return {"format_version": result.summary_version, **result.summary}


def read_run_record(doc: dict[str, Any]) -> RunRecord:
    return RunRecord.model_validate(_upgrade_run(doc))


def read_transcript_record(doc: dict[str, Any]) -> TranscriptRecord:
    return TranscriptRecord.model_validate(_upgrade_transcript(doc))


def _upgrade_run(doc: dict[str, Any]) -> dict[str, Any]:
    # Format 0 -> 1 only added fields, so an old run.json already has the current shape.
    return doc


def _upgrade_transcript(doc: dict[str, Any]) -> dict[str, Any]:
    # Format 0 -> 1 only added fields, so an old transcript already has the current shape.
    return doc
