"""Reading a finished (or partial) run directory: run.json, questions, result rows, transcripts.

Every command that opens a run directory reads it through these functions, so a missing, damaged
or foreign file is the same one-line `UserError` (naming the file) whichever command met it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic_core
from pydantic import ValidationError

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError, read_json, read_text
from medpanel.experiments.run.store.files import row_file
from medpanel.experiments.run.store.jsonline import lines_of
from medpanel.experiments.run.store.ownership import check_parts_belong, check_run_paths, study_problem
from medpanel.experiments.run.store.records import (
    RUN_FORMAT,
    TRANSCRIPT_FORMAT,
    RunRecord,
    TranscriptRecord,
    read_run_record,
    read_transcript_record,
)
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.runlock import lock_holder
from medpanel.experiments.run.store.sqlite_read import check_study_file, study_pair_count, study_rows
from medpanel.experiments.run.store.transcript_log import RecordPath, parse_reference, record_path

if TYPE_CHECKING:  # the store (and SQLAlchemy under it) is imported where a run's store is opened
    from medpanel.experiments.run.store.store import Store

RESTORE = "Restore it from a backup, or start the run again"


def condition_order(rows: list[Row], conditions: list[str] | None = None) -> list[str]:
    seen = conditions or []
    extra = sorted({r.condition for r in rows} - set(seen))
    return [c for c in seen if any(r.condition == c for r in rows)] + extra


def storage_url(run_dir: Path, record: RunRecord) -> str:
    return record.storage_url or f"sqlite:///{run_dir / 'study.db'}"


@dataclass
class RunData:
    run_dir: Path
    record: RunRecord
    """run.json as read."""
    rows: list[Row]
    questions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def conditions(self) -> list[str]:
        return condition_order(self.rows, self.record.slugs)

    def transcript(self, row: Row) -> dict[str, Any] | None:
        path = transcript_path(self.run_dir, row)
        if not path.is_file():
            return None
        return read_transcript(path)


def transcript_path(run_dir: Path, row: Row) -> Path:
    """Where a row's transcript is, inside the run directory: its file (older runs) or its record in
    a worker's log (a `RecordPath`, read like a file); a `UserError` when the row points out of it."""
    parsed = parse_reference(row.transcript)
    try:
        path = row_file(run_dir, parsed[0] if parsed else row.transcript)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return RecordPath.of(path, parsed[1], parsed[2]) if parsed else path


def transcript_paths(run_dir: Path) -> Callable[[Row], Path]:
    """`transcript_path` for the many rows of one run, the run directory resolved once (a report
    asks for thousands)."""
    root = Path(run_dir).resolve()
    inside: dict[str, bool] = {}
    """Each file's answer, by its name in the row: a run's rows share a few workers' logs, and
    resolving the same log's path for each of thousands of rows was a tenth of the HTML report's
    page building."""

    def path_of(row: Row) -> Path:
        parsed = parse_reference(row.transcript)
        relative = parsed[0] if parsed else row.transcript
        ok = inside.get(relative)
        if ok is None:
            ok = inside[relative] = (root / relative).resolve().is_relative_to(root)
        if ok:
            return record_path(run_dir, row.transcript)
        return transcript_path(run_dir, row)  # refuses it

    return path_of


def load_record(run_dir: Path, *, arg: str = "RUN_DIR") -> RunRecord:
    """run.json as a `RunRecord` (any format version), or a `UserError` naming the file."""
    run_dir = Path(run_dir)
    path = run_dir / "run.json"
    if not path.exists():
        what = "is a file, not a run directory" if run_dir.is_file() else (
            "does not exist" if not run_dir.exists() else "is not a run directory (no run.json)")
        raise UserError(f"{run_dir} {what}. Pass a directory under runs/", field=arg)
    meta = read_json(path, what="run.json", fix=RESTORE)
    if not isinstance(meta, dict) or not isinstance(meta.get("scenario"), dict) \
            or not isinstance(meta.get("conditions"), list) or not isinstance(meta.get("name"), str):
        raise UserError(f"not a medpanel run.json (it needs name, scenario and conditions). {RESTORE}",
                        file=str(path))
    version = meta.get("format_version", 0)
    if isinstance(version, int) and not isinstance(version, bool) and version > RUN_FORMAT:
        raise UserError(f"was written in run format {version}, newer than this medpanel reads (format {RUN_FORMAT}). "
                        "Upgrade medpanel (pip install -U medpanel) to open it", file=str(path))
    try:
        return read_run_record(meta)
    except ValidationError as exc:
        raise record_error(exc, path, "run.json", RESTORE) from None


def record_error(exc: ValidationError, path: Path, what: str, fix: str) -> UserError:
    """The first field a record failed on, as one line. A key the format does not have (a
    misspelling such as `recruted`, a key another program added) is named as the field, so it can be
    found in the file; any other failure says which field and why."""
    err = exc.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    if err["type"] == "extra_forbidden":
        return UserError(f"is not a field of a medpanel {what} (a misspelling, or a key another program added). "
                         f"Remove or correct it, or: {fix}", file=str(path), field=where)
    return UserError(f"not a medpanel {what} ({where or what}: {err['msg']}). {fix}", file=str(path))


def load_transcript(path: Path, *, messages: bool = True) -> TranscriptRecord:
    """A transcript file as a `TranscriptRecord` (any format version), or a `UserError` naming it.
    With `messages=False` each event's `messages` (about four fifths of a transcript's bytes) is
    checked to be a list of objects and left out, so the tables' read neither copies nor holds it."""
    return _checked(path, messages)[0]


def read_document(path: Path) -> dict[str, object]:
    """A transcript file decoded, not validated: a JSON object of a format this medpanel reads, or a
    `UserError` naming the file. What the report's one pass reads (`analysis.digest`), which checks
    the fields it uses as it reads them instead of building a record of every event."""
    fix = "The file is damaged: restore it, or delete its row and resume"
    try:
        # pydantic's own JSON parser: about twice as fast as json's, and it shares repeated strings
        # (roles, steps, replies) across documents; a damaged file is read again for json's message.
        doc = pydantic_core.from_json(path.read_bytes())
    except (OSError, ValueError):
        doc = _damaged_record(path) if isinstance(path, RecordPath) else read_json(path, what="transcript", fix=fix)
    if not isinstance(doc, dict):
        raise UserError("not a medpanel transcript (a JSON object). Restore it from a backup", file=str(path))
    version = doc.get("format_version", 0)
    if isinstance(version, int) and not isinstance(version, bool) and version > TRANSCRIPT_FORMAT:
        raise UserError(f"was written in transcript format {version}, newer than this medpanel reads (format "
                        f"{TRANSCRIPT_FORMAT}). Upgrade medpanel (pip install -U medpanel) to open it", file=str(path))
    return doc


def _damaged_record(path: RecordPath) -> object:
    """A log record that would not read or decode: its one line, naming the log and the byte."""
    fix = "The transcript log is damaged: restore it from a backup, or delete the row and resume"
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise UserError(f"cannot read the record at byte {path.offset} ({exc.strerror}). {fix}",
                        file=str(path)) from None
    except (ValueError, RecursionError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not JSON"
        raise UserError(f"the record at byte {path.offset} is not valid JSON ({why}). {fix}", file=str(path)) from None


def _checked(path: Path, messages: bool) -> tuple[TranscriptRecord, dict[str, object]]:
    """The record and the decoded document it was validated from."""
    doc = read_document(path)
    if not messages:
        _drop_messages(doc, path)
    try:
        return read_transcript_record(doc), doc
    except ValidationError as exc:
        raise record_error(exc, path, "transcript", "Restore it from a backup") from None


def _drop_messages(doc: dict[str, object], path: Path) -> None:
    events = doc.get("events")
    if not isinstance(events, list):
        return  # the record's own validation names the field
    for n, event in enumerate(events):
        if not isinstance(event, dict) or "messages" not in event:
            continue
        msgs = event.pop("messages")
        if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
            raise UserError(f"not a medpanel transcript (events.{n}.messages: a list of objects). "
                            "Restore it from a backup", file=str(path))


def read_transcript(path: Path, *, messages: bool = True) -> dict[str, object]:
    """A transcript file, checked (`load_transcript`), as the dict the viewer and export walk;
    `messages=False`: without the messages sent (what the tables and the audit read)."""
    record, doc = _checked(path, messages)
    if doc.get("format_version") == TRANSCRIPT_FORMAT:
        # A current-format file is the JSON dump of this very record, so the checked document is
        # what dumping it again would give: readers skip that copy of every transcript.
        return doc
    return record.model_dump(mode="json", exclude_unset=True)


def read_run_questions(run_dir: Path) -> list[Question]:
    """The run's own `questions.jsonl` (what resume works through); a `UserError` when missing or damaged."""
    path = Path(run_dir) / "questions.jsonl"
    text = read_text(path, what="question list of this run", fix=RESTORE)
    out = []
    for n, line in enumerate(lines_of(text), 1):
        if line.strip():
            try:
                out.append(Question.model_validate_json(line))
            except ValidationError as exc:
                detail = str(exc).splitlines()[1:2] or [""]
                raise UserError(f"line {n} is not a question ({detail[0].strip()}): the file is damaged. {RESTORE}",
                                file=str(path)) from None
    if not out:
        raise UserError(f"holds no question: the file is damaged. {RESTORE}", file=str(path))
    return out


def open_store(run_dir: Path, record: RunRecord) -> Store:
    """The store of an existing run, once no path the run or its readers write is a link
    (`check_run_paths`). A SQLite run whose study.db is gone, emptied or not this run's is refused:
    opening it would create an empty one, and the run would read as having nothing done (a resume
    would redo every question)."""
    # The store, and SQLAlchemy under it, late: start-up of a reader of the run's own SQLite study
    # (`read_rows`, `done_pairs`) needs neither; PostgreSQL and an older study open it here.
    from medpanel.experiments.run.store.store import Store

    check_run_paths(run_dir)
    url = storage_url(run_dir, record)
    require_study(run_dir, url)
    store = Store(url, run_dir)
    try:
        check_parts_belong(run_dir, record, store.get_meta("run_json"), None)
    except UserError:
        store.close()
        raise
    return store


def read_rows(run_dir: Path, record: RunRecord, *, sync: bool = False) -> list[Row]:
    """The run's result rows, with the checks of `open_store`. The run's own SQLite study, when it has
    the current schema, is read with sqlite3 alone (`sqlite_read`: a reader writes nothing to it and
    needs no SQLAlchemy); other storage, or an older schema, through the store (`sync`: transcripts
    committed by other machines written out first)."""
    if record.storage_url is None:
        read = study_rows(_checked_own_study(run_dir, record))
        if read is not None:
            check_parts_belong(run_dir, record, read[0], None)
            return read[1]
    store = open_store(run_dir, record)
    try:
        if sync:
            store.sync_transcripts()
        return store.rows()
    finally:
        store.close()


def done_pairs(run_dir: Path, record: RunRecord) -> int:
    """How many pairs have a result row (`Store.done`), read as `read_rows` reads the rows."""
    if record.storage_url is None:
        db = _checked_own_study(run_dir, record)
        count = study_pair_count(db)
        if count is not None:
            return count
    store = open_store(run_dir, record)
    try:
        return len(store.done())
    finally:
        store.close()


def _checked_own_study(run_dir: Path, record: RunRecord) -> Path:
    """The run's own study.db, with the checks `open_store` makes before it opens it."""
    db = run_dir / "study.db"
    check_run_paths(run_dir)
    require_study_file(run_dir, db)
    check_study_file(db, run_dir)
    return db


def require_study(run_dir: Path, url: str) -> None:
    """Refuse an existing run whose SQLite study file is gone or holds no run's study (see `open_store`)."""
    require_study_file(run_dir, sa_url_path(url) if url.startswith("sqlite") else None)


def require_study_file(run_dir: Path, db: Path | None) -> None:
    """`require_study` on the study's file (None: not a SQLite file)."""
    if db is not None and not db.is_file():
        raise UserError(f"is missing: the study database holds every result row of the run in {run_dir}. "
                        f"{RESTORE}", file=str(db))
    problem = study_problem(db) if db is not None else None
    if problem is not None:
        raise UserError(f"does not hold the study of the run in {run_dir} ({problem}): opened, it would read as a "
                        f"run with nothing done. {RESTORE}", file=str(db))


def sa_url_path(url: str) -> Path | None:
    """The file of a `sqlite:///...` URL (None for an in-memory database)."""
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return Path(database) if database and database != ":memory:" else None


def read_questions(run_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The run's `questions.jsonl` as records keyed by (dataset, qid); empty if it has none."""
    questions: dict[tuple[str, str], dict[str, Any]] = {}
    qfile = run_dir / "questions.jsonl"
    if qfile.is_file():
        for n, line in enumerate(lines_of(read_text(qfile, what="question list of this run", fix=RESTORE)), 1):
            if line.strip():
                try:
                    q = json.loads(line)
                    questions[(str(q["dataset"]), str(q["qid"]))] = q
                except (ValueError, KeyError, TypeError):
                    raise UserError(f"line {n} is not a question record: the file is damaged. {RESTORE}",
                                    file=str(qfile)) from None
    return questions


def load_run(run_dir: Path, *, arg: str = "RUN_DIR") -> RunData:
    """Everything the viewer, export and audit need; a UserError if it is not a run directory."""
    run_dir = Path(run_dir)
    record = load_record(run_dir, arg=arg)
    rows = read_rows(run_dir, record)
    questions = read_questions(run_dir)
    status = read_status(run_dir)
    if status.get("state") == "running" and lock_holder(run_dir) is None:
        status["state"] = "killed"  # a session wrote "running" and never finished: resume it
    return RunData(run_dir=run_dir, record=record, rows=rows, questions=questions, status=status)


STATES = ("running", "complete", "stopped", "incomplete")
"""What a session writes in status.json's `state`."""


def read_status(run_dir: Path) -> dict[str, object]:
    """status.json as the runner wrote it ({} when there is none); a `UserError` naming it otherwise,
    so a file that is not the run's own is never taken, or replaced, without a word."""
    path = run_dir / "status.json"
    if not path.is_file() and not path.is_symlink():
        return {}
    fix = "Delete it; the next run or resume writes it again"
    status = read_json(path, what="status.json", fix=fix)
    if not isinstance(status, dict) or status.get("state") not in STATES:
        raise UserError(f"not a medpanel status document (a JSON object whose state is one of {', '.join(STATES)}). "
                        f"{fix}", file=str(path))
    return status


def progress_note(run_dir: Path) -> str | None:
    """"in progress: N of M pairs done" for a run a process is working on now, "incomplete: ..." for
    one that stopped short; None for a finished run. Readers print it, so partial tables never pass
    for a whole run's."""
    record = load_record(run_dir)
    total = record.n_pairs
    if total is None:
        return None
    done = done_pairs(run_dir, record)
    try:
        status = read_status(run_dir)
    except UserError:  # damaged: the note is about the pairs, which the study tells
        status = {}
    running = lock_holder(run_dir) is not None or (isinstance(status, dict) and status.get("state") == "running"
                                                    and record.storage_url is not None)
    if running:
        return f"{run_dir} is in progress: {done} of {total} pairs done; these results are partial"
    if done < total:
        return f"{run_dir} is incomplete: {done} of {total} pairs done; resume with: medpanel run --resume {run_dir}"
    return None

