"""The documents of one corpus: MedRAG-style records held in memory as parallel arrays.

Retrieval hot paths map an index row to provenance millions of times, so the store keeps plain
lists (one per field) loaded once per process instead of reading from disk per query. On disk it
is `docs.jsonl`, itself valid MedRAG JSONL (one flat record a line), so a corpus folder can be
re-ingested or inspected with ordinary tools.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from medpanel.inputs import InputFileError, open_input
from medpanel.retrieval.errors import CorpusDamagedError

Scalar = str | int | float | bool

DOCS_NAME = "docs.jsonl"
CORE_FIELDS = ("id", "title", "content", "url", "year", "source")


@dataclass(frozen=True)
class Doc:
    """One MedRAG record: the core fields plus scalar extras (e.g. MedQuAD's `qtype`)."""

    id: str
    title: str
    content: str
    url: str | None = None
    year: int | None = None
    origin: str | None = None
    """The record's own `source` field (e.g. `GARD`); the corpus name is kept elsewhere."""
    meta: dict[str, Scalar] = field(default_factory=dict)

    def indexed_text(self) -> str:
        """What BM25 and the embedder see: MedRAG's `contents` (title + ". " + content)."""
        return f"{self.title}. {self.content}" if self.title else self.content

    def to_record(self) -> dict[str, object]:
        record: dict[str, object] = {"id": self.id, "title": self.title, "content": self.content}
        if self.url is not None:
            record["url"] = self.url
        if self.year is not None:
            record["year"] = self.year
        if self.origin is not None:
            record["source"] = self.origin
        record.update(self.meta)
        return record


class DocStore:
    """Parallel arrays over a corpus's documents, addressable by row and by id."""

    def __init__(self, docs: Iterable[Doc] = ()) -> None:
        self.ids: list[str] = []
        self.titles: list[str] = []
        self.contents: list[str] = []
        self.urls: list[str | None] = []
        self.years: list[int | None] = []
        self.origins: list[str | None] = []
        self.metas: list[dict[str, Scalar]] = []
        self.row_of: dict[str, int] = {}
        for doc in docs:
            self.put(doc)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.row_of

    def put(self, doc: Doc) -> str:
        """Insert or replace by id; returns `new`, `updated` or `unchanged`."""
        row = self.row_of.get(doc.id)
        if row is None:
            self.row_of[doc.id] = len(self.ids)
            self.ids.append(doc.id)
            self.titles.append(doc.title)
            self.contents.append(doc.content)
            self.urls.append(doc.url)
            self.years.append(doc.year)
            self.origins.append(doc.origin)
            self.metas.append(doc.meta)
            return "new"
        if self.doc(row) == doc:
            return "unchanged"
        self.titles[row] = doc.title
        self.contents[row] = doc.content
        self.urls[row] = doc.url
        self.years[row] = doc.year
        self.origins[row] = doc.origin
        self.metas[row] = doc.meta
        return "updated"

    def doc(self, row: int) -> Doc:
        return Doc(
            id=self.ids[row],
            title=self.titles[row],
            content=self.contents[row],
            url=self.urls[row],
            year=self.years[row],
            origin=self.origins[row],
            meta=self.metas[row],
        )

    def __iter__(self) -> Iterator[Doc]:
        return (self.doc(row) for row in range(len(self.ids)))

    def indexed_texts(self) -> list[str]:
        return [f"{t}. {c}" if t else c for t, c in zip(self.titles, self.contents, strict=True)]

    def save(self, folder: Path) -> Path:
        """Write `docs.jsonl` atomically (temp file + rename) so readers never see half a file."""
        path = folder / DOCS_NAME
        tmp = path.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for doc in self:
                fh.write(json.dumps(doc.to_record(), ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, folder: Path) -> DocStore:
        """Read `docs.jsonl` written by `save` (trusted, so no per-field validation)."""
        store = cls()
        path = folder / DOCS_NAME
        if not os.path.lexists(path):
            return store
        fix = f"Delete {folder} and ingest its files again (medpanel corpus ingest PATH... --name {folder.name})"
        lineno = 0
        try:
            # Checked first (a FIFO or a device at its name is refused, not read), then streamed.
            with open_input(path, what="corpus document file", fix=fix) as raw:
                for line in io.TextIOWrapper(raw, encoding="utf-8", newline="\n"):
                    lineno += 1  # counted by hand: the error below names the line being read
                    if line.strip():
                        store.put(doc_from_trusted(json.loads(line)))
        except InputFileError as err:
            raise CorpusDamagedError(f"{err.path}: {err.problem}. {fix}") from None
        except (ValueError, TypeError, AttributeError, KeyError, OSError) as err:  # JSON, UTF-8, a record's shape
            why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
            raise CorpusDamagedError(f"{path}: line {lineno} is damaged ({why}). {fix}") from None
        return store


def doc_from_trusted(record: dict[str, object]) -> Doc:
    meta = {k: v for k, v in record.items() if k not in CORE_FIELDS}
    year = record.get("year")
    return Doc(
        id=str(record["id"]),
        title=str(record.get("title", "")),
        content=str(record["content"]),
        url=record.get("url") if isinstance(record.get("url"), str) else None,  # type: ignore[arg-type]
        year=year if isinstance(year, int) else None,
        origin=record.get("source") if isinstance(record.get("source"), str) else None,  # type: ignore[arg-type]
        meta=meta,  # type: ignore[arg-type]
    )
