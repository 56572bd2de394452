"""Tests' hands on a run's transcripts in either layout: a row's record in a worker's log (a
`RecordPath`) or an older run's file, removed, damaged or rewritten as a user's edit would."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from medpanel.experiments.run.store.transcript_log import RecordPath, log_files, record_path, reference


def first_transcript(run: Path) -> Path:
    """The transcript of the study's first row by its key (what `select qid ... limit 1` finds)."""
    with sqlite3.connect(run / "study.db") as conn:
        query = 'select transcript from mp_results order by condition, dataset, qid, "repeat" limit 1'
        (ref,) = conn.execute(query).fetchone()
    return record_path(run, ref)


def remove(path: Path) -> None:
    """A file unlinked; a log record blanked out in place, as if its bytes were lost."""
    if isinstance(path, RecordPath):
        overwrite(path, b"")
    else:
        path.unlink()


def overwrite(path: Path, data: bytes) -> None:
    """A file's bytes replaced; a log record's bytes replaced in place, padded with spaces (no longer
    than the record: the records after it stay where their rows say)."""
    if not isinstance(path, RecordPath):
        path.write_bytes(data)
        return
    assert len(data) <= path.length
    with open(path, "r+b") as fh:
        fh.seek(path.offset)
        fh.write(data + b" " * (path.length - len(data)))


def rewrite(run: Path, path: Path, doc: dict[str, Any]) -> None:
    """A transcript edited to `doc`: a file written over; a log record appended anew at the end of
    its log and every row that named the old one pointed at it."""
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    if not isinstance(path, RecordPath):
        path.write_text(body)
        return
    name = str(Path(path).relative_to(run))
    with open(path, "ab") as fh:
        offset = fh.tell()
        fh.write(body.encode() + b"\n")
    with sqlite3.connect(run / "study.db") as conn:
        conn.execute("update mp_results set transcript = ? where transcript = ?",
                     (reference(name, offset, len(body.encode())), reference(name, path.offset, path.length)))


def transcript_files(run: Path) -> list[Path]:
    """The files transcripts/ holds: the workers' logs and an older run's files."""
    return log_files(run) + sorted((run / "transcripts").rglob("*.json"))
