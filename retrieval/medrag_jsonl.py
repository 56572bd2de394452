"""Reading MedRAG-format JSONL (`id`, `title`, `content`, optional `url`, `year`, `source`).

Each line is validated on its own; a bad line yields a message with its line number instead of a
`Doc`, so ingestion can report file:line and carry on. Nothing is dropped without a trace:
non-scalar extra fields (e.g. PubMed `meshes` lists) are counted by the caller.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from medpanel.inputs import InputFileError, open_input, special_kind
from medpanel.retrieval.docstore import CORE_FIELDS, Doc, Scalar
from medpanel.retrieval.errors import CorpusInputError

_YEAR_RE = re.compile(r"^\s*(\d{4})")


@dataclass
class ParsedLine:
    """One line's outcome: a document, or the reason it was skipped."""

    line: int
    doc: Doc | None = None
    error: str | None = None
    dropped_fields: list[str] = field(default_factory=list)


def _parse_year(value: object) -> int | None:
    # PubMed years arrive as ints, web snapshots as dates ("2019-05-01"): keep the year.
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError("'year' must be an integer or a date string")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and (m := _YEAR_RE.match(value)):
        return int(m.group(1))
    raise ValueError(f"'year' must be an integer or a date string, got {value!r}")


def parse_record(obj: object) -> tuple[Doc, list[str]]:
    """Validate one decoded JSON value; returns the `Doc` and the names of dropped extra fields."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    doc_id = obj.get("id")
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError("missing or empty 'id'")
    content = obj.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ValueError("missing or empty 'content'")
    title = obj.get("title", "")
    if title is None:
        title = ""
    if not isinstance(title, str):
        raise ValueError("'title' must be a string")
    url = obj.get("url")
    if url is not None and not isinstance(url, str):
        raise ValueError("'url' must be a string or null")
    origin = obj.get("source")
    if origin is not None and not isinstance(origin, str):
        raise ValueError("'source' must be a string or null")
    meta: dict[str, Scalar] = {}
    dropped: list[str] = []
    for key, value in obj.items():
        if key in CORE_FIELDS or value is None:
            continue
        if isinstance(value, str | int | float | bool):
            meta[key] = value
        else:
            dropped.append(key)
    doc = Doc(
        id=doc_id.strip(),
        title=title.strip(),
        content=content.strip(),
        url=url or None,
        year=_parse_year(obj.get("year")),
        origin=origin or None,
        meta=meta,
    )
    return doc, dropped


def read_jsonl(path: Path) -> Iterator[ParsedLine]:
    """Parse a MedRAG JSONL file line by line; blank lines are not records and are passed over."""
    try:  # checked first: a FIFO or a device is refused before a byte is read
        raw_file = open_input(path, what="MedRAG JSONL file", fix="Pass regular MedRAG JSONL files")
    except InputFileError as err:
        raise CorpusInputError(str(err)) from None
    with io.TextIOWrapper(raw_file, encoding="utf-8", errors="strict") as fh:
        line_no = 0
        while True:
            line_no += 1
            try:
                raw = fh.readline()
            except UnicodeDecodeError as err:
                # The rest of the file cannot be trusted to be aligned on lines: stop and say so.
                yield ParsedLine(line_no, error=f"not valid UTF-8 ({err.reason}); rest of file skipped")
                return
            if not raw:
                return
            if not raw.strip():
                continue
            try:
                doc, dropped = parse_record(json.loads(raw))
            except json.JSONDecodeError as err:
                yield ParsedLine(line_no, error=f"invalid JSON: {err.msg} (column {err.colno})")
            except ValueError as err:
                yield ParsedLine(line_no, error=str(err))
            else:
                yield ParsedLine(line_no, doc=doc, dropped_fields=dropped)


def expand_inputs(paths: list[Path]) -> list[Path]:
    """Files to ingest: each path as given, folders searched recursively for `*.jsonl`."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.jsonl") if p.is_file())  # a FIFO in a folder is passed over
            if not found:
                raise CorpusInputError(f"{path}: folder holds no *.jsonl file. Pass MedRAG JSONL files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif special_kind(path):
            raise CorpusInputError(f"{path}: is {special_kind(path)}, not a MedRAG JSONL file. Pass regular files")
        else:
            raise CorpusInputError(f"{path}: no such file or folder. Check the path")
    if not files:
        raise CorpusInputError("no input given. Pass one or more MedRAG JSONL files or folders")
    return files
