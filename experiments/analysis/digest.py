"""What the report keeps of each result row's transcript: a small typed digest, read in one pass.

A full-protocol run holds hundreds of megabytes of transcripts; the tables, the figures, the cost
ledger, the leakage audit and the answer transitions need a few facts of each. `read_digests`
reads the rows' transcripts one after another, in row order, and reduces each to a `RowDigest`
(its trajectory, its calls' costs, its passages, CLEAR's decision) before the next is read: no
document outlives its digest, so the report's memory is the digests', not the transcripts'.

A row whose transcript file is missing still gets a digest (`missing`), built from the row, so it
is counted (its first state is invalid), never dropped. A damaged transcript is the one-line error
of `rundir.load_transcript`, naming the file and the field.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from medpanel.experiments.analysis.event_facts import (
    TRANSCRIPT_FIELDS,
    BadField,
    EventFacts,
    events_of,
    facts_of,
    version_of,
)
from medpanel.experiments.analysis.inference.ledger import CallCost
from medpanel.experiments.analysis.trajectory import Outcome, outcome_of, trajectory_of
from medpanel.experiments.analysis.trajectory_types import PATHWAYS, Trajectory
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.records import TRANSCRIPT_FORMAT
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import load_transcript, read_document, transcript_paths

EVIDENCE_KEYS = ("evidence", "documents", "passages")
"""An event's `data` lists that hold passages (the curator's brief, CLEAR's web documents, a
retriever's raw hits): what the leakage audit checks and the viewer lists."""


@dataclass(frozen=True, slots=True)
class Passage:
    """One passage-like object an event carried in its data (the leakage audit checks its text)."""

    event: int
    """Index of the event in the transcript's `events`."""
    role: str
    step: str
    key: str
    """Which of `EVIDENCE_KEYS` held it."""
    index: int
    item: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Ruling:
    """CLEAR's override guard or challenge audit as its decision recorded it."""

    outcome: str
    default: tuple[str, ...]
    """The letters the mechanism protects."""
    challenger: tuple[str, ...]
    """The dynamic pathway's letters."""


@dataclass(frozen=True, slots=True)
class Decision:
    """CLEAR's decision event (a transcript's last event, with its evidence bundle)."""

    candidates: Mapping[str, tuple[str, ...]]
    """Pathway -> its candidate's letters (empty when it had none)."""
    guard: Ruling
    audit: Ruling


@dataclass(frozen=True, slots=True)
class RowDigest:
    """One result row with what the report reads of its transcript."""

    row: Row
    missing: bool
    """The transcript file is gone: everything below is built from the row."""
    outcome: Outcome
    trajectory: Trajectory
    calls: tuple[CallCost, ...]
    """Every model call, in event order (the cost ledger's input)."""
    passages: tuple[Passage, ...]
    question: Mapping[str, object]
    """The transcript's `question` (text, options, gold): what the leakage audit checks passages against."""
    decision: Decision | None
    mcq: bool
    """Options and gold letters: a multiple-choice item CLEAR's tables score."""


def letters(answer: Any) -> tuple[str, ...]:
    """A recorded answer (a letter or a list of letters) as sorted letters; () when absent."""
    if not answer:
        return ()
    return tuple(sorted({str(a) for a in answer})) if isinstance(answer, list | tuple) else (str(answer),)


def _ruling(rec: Any) -> Ruling:
    rec = rec or {}
    return Ruling(str(rec.get("outcome", "not_triggered")), letters(rec.get("default")),
                  letters(rec.get("challenger")))


def decision_of(events: Sequence[EventFacts]) -> Decision | None:
    """CLEAR's decision: the last event, when it is a decision with an evidence bundle."""
    last = events[-1] if events else None
    if last is None or last.kind != "decision" or not isinstance(last.data.get("bundle"), dict):
        return None
    cands = last.data["bundle"].get("candidates") or {}
    return Decision({p: letters((cands.get(p) or {}).get("answer")) for p in PATHWAYS},
                    _ruling(last.data.get("guard")), _ruling(last.data.get("audit")))


def passages_of(raw_events: Iterable[Any]) -> Iterator[Passage]:
    """Each passage-like object of each event's data, in event order."""
    for idx, event in enumerate(raw_events):
        data = event.get("data") if isinstance(event, dict) else None
        if not data:
            continue
        for key in EVIDENCE_KEYS:
            items = data.get(key)
            if isinstance(items, list):
                for i, item in enumerate(items):
                    if isinstance(item, dict):
                        yield Passage(idx, str(event.get("role", "")), str(event.get("step", "")), key, i, item)


def _split(letters_text: str | None) -> list[str]:
    return [x for x in (letters_text or "").split(",") if x]


def stand_in(row: Row) -> dict[str, object]:
    """A missing transcript's document, built from its row: no events, so its first state is invalid."""
    return {"condition": row.condition, "question": {"dataset": row.dataset, "qid": row.qid},
            "repeat": row.repeat, "answer": _split(row.answer), "gold": _split(row.gold), "correct": row.correct,
            "invalid": row.invalid, "error": row.error, "summary": row.summary, "events": [],
            "missing_transcript": True}


def _digest(row: Row, doc: Mapping[str, Any], events: list[EventFacts], missing: bool, scoring: str) -> RowDigest:
    question = doc.get("question") or {}
    if not isinstance(question, Mapping):
        raise BadField("question", "an object")
    outcome = outcome_of(doc)
    return RowDigest(
        row=row, missing=missing, outcome=outcome, trajectory=trajectory_of(outcome, events, scoring=scoring),
        calls=tuple(CallCost(e.role, e.step, e.model, e.prompt_tokens, e.completion_tokens, e.cache_hit, e.attempts,
                             bool(e.error), bool(e.data.get("batch"))) for e in events if e.kind == "call"),
        passages=tuple(passages_of(doc.get("events") or ())), question=question, decision=decision_of(events),
        mcq=bool(question.get("options")) and bool(doc.get("gold")))


def digest(row: Row, doc: Mapping[str, object] | None, *, scoring: str = "exact_set") -> RowDigest:
    """A row and its transcript document as decoded (None: the file is missing) as the report's
    digest. A field of the wrong type raises `BadField`."""
    if doc is None:
        return _digest(row, stand_in(row), [], True, scoring)
    return _digest(row, doc, events_of(doc.get("events"), version_of(doc)), False, scoring)


def read_digest(path: Path | None, row: Row, *, scoring: str = "exact_set") -> RowDigest:
    """One row's digest from its transcript file (None or not a file: missing), the document read
    and dropped; a damaged file is one `UserError` naming it."""
    if path is None or not path.is_file():
        return _digest(row, stand_in(row), [], True, scoring)
    try:
        fields = TRANSCRIPT_FIELDS.validate_json(path.read_bytes())
    except (OSError, ValidationError):
        # Not JSON, or a field of another type: the record's own reading names the file, the
        # field and why, as `medpanel show` would. It runs only on such a file, never on the way
        # through a good run.
        load_transcript(path, messages=False)
        raise UserError("not a medpanel transcript. Restore it from a backup", file=str(path)) from None
    version = fields.get("format_version", 0)
    if version > TRANSCRIPT_FORMAT:
        read_document(path)  # refuses it, naming the format
    return _digest(row, fields, facts_of(fields.get("events") or [], version), False, scoring)


def read_with_document(path: Path | None, row: Row, *, scoring: str = "exact_set"
                       ) -> tuple[dict[str, object] | None, RowDigest]:
    """One row's transcript document, decoded (None: missing), with its digest made from that same
    decoding: what the HTML report's one pass reads, where each question page shows the documents
    whole and the tables keep only their digests. The digest is `read_digest`'s (the fields checked
    by `TRANSCRIPT_FIELDS` in pydantic's core, from the decoded document instead of its bytes); a
    damaged file is the same one-line error."""
    if path is None or not path.is_file():
        return None, _digest(row, stand_in(row), [], True, scoring)
    doc = read_document(path)  # a newer format is refused here, naming it
    try:
        fields = TRANSCRIPT_FIELDS.validate_python(doc)
    except ValidationError:
        read_digest(path, row, scoring=scoring)  # the record's own reading names the file and the field
        raise UserError("not a medpanel transcript. Restore it from a backup", file=str(path)) from None
    return doc, _digest(row, fields, facts_of(fields.get("events") or [], fields.get("format_version", 0)), False,
                        scoring)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cycle collector off while a run's digests are made: each document is freed by its
    reference count as soon as its digest is built (JSON has no cycles), and the collector's passes
    over the growing list of digests cost a tenth of the read on a full-protocol run."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def gc_frozen() -> Iterator[None]:
    """The objects alive now (a run's digests: half a million on a full-protocol one) left out of the
    cycle collector's passes while the tables and figures are built from them: the builders allocate
    enough (a pydantic view of every row's summary per table, the model fits) to set off full passes,
    each of which would walk every digest again (three quarters of those tables' time). What they
    make is collected as usual; the frozen objects are the collector's again afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def read_digests(run_dir: Path, rows: Iterable[Row], *, scoring: str = "exact_set") -> Iterator[RowDigest]:
    """Each row's digest, in row order, one transcript read at a time (a generator: the caller
    decides what it keeps, and no document outlives its row's turn)."""
    path_of = transcript_paths(run_dir)
    for row in rows:
        yield read_digest(path_of(row) if row.transcript else None, row, scoring=scoring)
