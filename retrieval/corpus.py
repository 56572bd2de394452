"""Ingesting MedRAG JSONL into a corpus folder, and describing the corpora that exist.

A corpus folder (`$MEDPANEL_HOME/corpora/NAME`) holds:
- `docs.jsonl`: the documents (ids, titles, content, provenance), row order = index order;
- `bm25/`: the `bm25s` index, saved with bm25s's own format;
- `chroma/`: the persistent ChromaDB collection (only when ingested with `dense=True`);
- `manifest.json`: name, size, per-source counts, dense model, input files, timestamps.

Ingesting is an upsert by id: re-ingesting the same records changes nothing, changed records
replace their old version in place, and the BM25 index is rebuilt over the union. Dense embedding
runs only for new or changed documents, since embedding the shared corpus costs ~20 minutes.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from medpanel.inputs import InputFileError, read_input_text
from medpanel.retrieval import bm25_index, chroma_store
from medpanel.retrieval.docstore import Doc, DocStore
from medpanel.retrieval.errors import CorpusDamagedError, CorpusInputError, DenseUnavailableError
from medpanel.retrieval.home import (
    MANIFEST_NAME,
    available_corpora,
    check_corpus_name,
    corpora_root,
    resolve_corpus,
)
from medpanel.retrieval.medrag_jsonl import expand_inputs, read_jsonl

_MAX_PRINTED_PROBLEMS = 20
MAX_MANIFEST_BYTES = 4 * 2**20
"""A manifest is a page of JSON; a larger file at its name is not one."""
_EMBED_BATCH = 256


class LineProblem(BaseModel):
    """A skipped input line."""

    file: str
    """The input file, as given."""
    line: int
    """1-based line number."""
    message: str
    """What is wrong with it."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class Manifest(BaseModel):
    """`manifest.json`: what a corpus folder holds and where it came from."""

    name: str
    """Corpus name (the folder name)."""
    n_docs: int
    """Documents in the corpus (unique ids)."""
    sources: dict[str, int] = Field(default_factory=dict)
    """Documents per record `source` field (`(none)` when absent)."""
    created: str
    """First ingest, ISO 8601 UTC."""
    updated: str
    """Latest ingest, ISO 8601 UTC."""
    dense: bool = False
    """Whether a ChromaDB collection with embeddings exists."""
    dense_model: str | None = None
    """The embedding model (or embedding function name) used for the collection."""
    n_embedded: int = 0
    """Documents in the ChromaDB collection."""
    files: list[str] = Field(default_factory=list)
    """Every input file ever ingested into this corpus (absolute paths)."""
    bm25: dict[str, object] = Field(default_factory=dict)
    """BM25 settings (tokenizer, parameters) so a reader knows how the index was built."""
    revision: str = ""
    """Changes whenever the documents or indexes change; caches of loaded retrievers key on it."""
    format_version: int = 1
    """Layout version of the corpus folder."""


class IngestReport(BaseModel):
    """What one `ingest` call did; problems are listed, never dropped silently."""

    name: str
    path: Path
    files: list[str]
    """Input files read (folders expanded)."""
    n_read: int = 0
    """Valid records read."""
    n_new: int = 0
    n_updated: int = 0
    n_unchanged: int = 0
    n_duplicates: int = 0
    """Records whose id appeared earlier in the same input (the later one wins)."""
    n_docs: int = 0
    """Documents in the corpus after the ingest."""
    problems: list[LineProblem] = Field(default_factory=list)
    """Malformed lines that were skipped."""
    dropped_fields: dict[str, int] = Field(default_factory=dict)
    """Non-scalar extra fields not kept (field -> records), e.g. PubMed `meshes` lists."""
    dense: bool = False
    n_embedded: int = 0
    """Documents embedded during this call (new or changed only)."""
    seconds_read: float = 0.0
    seconds_bm25: float = 0.0
    seconds_dense: float = 0.0


class CorpusInfo(BaseModel):
    """One corpus as `medpanel corpus list` shows it."""

    name: str
    path: Path
    n_docs: int
    dense: bool
    dense_model: str | None
    disk_bytes: int
    sources: dict[str, int]
    updated: str


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def rebuild_fix(corpus_dir: Path) -> str:
    """How to get a working corpus back when its own files are damaged."""
    return (f"Delete {corpus_dir} and ingest its files again (medpanel corpus ingest PATH... --name "
            f"{corpus_dir.name})")


def read_manifest(corpus_dir: Path) -> Manifest:
    """The corpus's manifest, or a `CorpusDamagedError` naming it (damaged, empty, not a regular file)."""
    path = corpus_dir / MANIFEST_NAME
    try:
        text = read_input_text(path, what="corpus manifest", fix=rebuild_fix(corpus_dir),
                               max_bytes=MAX_MANIFEST_BYTES)
        return Manifest.model_validate_json(text)
    except InputFileError as err:
        raise CorpusDamagedError(f"{err.path}: {err.problem}. {rebuild_fix(corpus_dir)}") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "the document"
        raise CorpusDamagedError(f"{path}: damaged manifest ({where}: {first.get('msg')}). "
                                 f"{rebuild_fix(corpus_dir)}") from None


def _write_manifest(corpus_dir: Path, manifest: Manifest) -> None:
    path = corpus_dir / MANIFEST_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest.model_dump(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _progress(console: Console, enabled: bool, *, bytes_: bool) -> Progress:
    amount = DownloadColumn() if bytes_ else MofNCompleteColumn()
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        amount,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        # A bar redrawn into a pipe or a log is noise (and the only stderr output besides errors).
        disable=not enabled or not console.is_terminal,
        transient=False,
    )


def _embedder(name: str, embedding_function: Any | None, old_manifest: Manifest | None) -> tuple[Any, str]:
    """The embedding function of a dense ingest (default: the packaged MiniLM) and its model's name."""
    # Optional heavy dependency: the [dense] extra (torch, sentence-transformers) behind chromadb's
    # embedding types, imported only for a dense ingest.
    from medpanel.retrieval import embedding

    if embedding_function is None:
        # Fail before reading anything: a missing extra should cost the user no time.
        try:
            embedding_function = embedding.default_embedding_function()
        except DenseUnavailableError as err:
            if old_manifest and old_manifest.dense:
                raise DenseUnavailableError(
                    f"corpus {name!r} has a dense index that new documents must join; {err}"
                ) from err
            raise
    return embedding_function, embedding.embedder_model_name(embedding_function)


def ingest(
    paths: Sequence[str | Path],
    name: str,
    *,
    dense: bool = False,
    progress: bool = True,
    embedding_function: object | None = None,
    console: Console | None = None,
) -> IngestReport:
    """Read MedRAG JSONL files (or folders of them) into corpus NAME; upsert by id.

    `dense=True` also embeds into ChromaDB with `embedding_function` (default: the packaged
    MiniLM, needs the `[dense]` extra). A corpus that already has a dense index stays in sync:
    new or changed documents are embedded even without `dense=True`. Malformed lines are
    skipped, collected in the report and printed as warnings with file:line.
    """
    check_corpus_name(name)
    files = expand_inputs([Path(p) for p in paths])
    console = console or Console(stderr=True, highlight=False)
    corpus_dir = corpora_root() / name
    # Anything at the manifest's name is read (a damaged or special one is refused, never replaced).
    old_manifest = read_manifest(corpus_dir) if os.path.lexists(corpus_dir / MANIFEST_NAME) else None
    dense = dense or bool(old_manifest and old_manifest.dense)
    embedder = ""
    if dense:
        embedding_function, embedder = _embedder(name, embedding_function, old_manifest)

    report = IngestReport(name=name, path=corpus_dir, files=[str(f) for f in files], dense=dense)
    store = DocStore.load(corpus_dir)
    # Collect the input first (last occurrence of an id wins), then upsert: a re-ingest of input
    # with repeated ids must compare each id's final version with the stored one, or it would
    # flip between versions and rebuild the index for nothing.
    incoming: dict[str, Doc] = {}
    dropped: Counter[str] = Counter()

    started = time.perf_counter()
    with _progress(console, progress, bytes_=True) as bar:
        task = bar.add_task("reading", total=sum(f.stat().st_size for f in files))
        for file in files:
            bar.update(task, description=f"reading {file.name}")
            for parsed in read_jsonl(file):
                if parsed.doc is None:
                    report.problems.append(LineProblem(file=str(file), line=parsed.line, message=str(parsed.error)))
                    continue
                report.n_read += 1
                dropped.update(parsed.dropped_fields)
                if parsed.doc.id in incoming:
                    report.n_duplicates += 1
                incoming[parsed.doc.id] = parsed.doc
            bar.update(task, advance=file.stat().st_size)
    changed: set[str] = set()
    for doc in incoming.values():
        status = store.put(doc)
        setattr(report, f"n_{status}", getattr(report, f"n_{status}") + 1)
        if status != "unchanged":
            changed.add(doc.id)
    report.seconds_read = time.perf_counter() - started
    report.dropped_fields = dict(dropped)
    if len(store) == 0:
        # One line: the first problem says what is wrong with the input (a binary or non-UTF-8 file,
        # the wrong format); a warning per line would bury it.
        first = f" First problem: {report.problems[0]}" if report.problems else ""
        more = f" ({len(report.problems) - 1} more lines skipped)" if len(report.problems) > 1 else ""
        raise CorpusInputError(
            f"{', '.join(report.files)}: no valid record (need 'id', 'title', 'content' per line).{first}{more}. "
            "Give MedRAG JSONL saved as UTF-8"
        )
    _print_problems(console, report)
    corpus_dir.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    if changed or not (corpus_dir / bm25_index.BM25_DIR).is_dir():
        with console.status("building BM25 index", spinner="dots") if progress else nullcontext():
            store.save(corpus_dir)
            bm25_index.save_index(bm25_index.build_index(store.indexed_texts()), corpus_dir)
    report.seconds_bm25 = time.perf_counter() - started

    n_in_collection = old_manifest.n_embedded if old_manifest else 0
    dense_model = old_manifest.dense_model if old_manifest else None
    if dense:
        started = time.perf_counter()
        report.n_embedded, n_in_collection = _embed(corpus_dir, store, changed, embedding_function, console, progress)
        dense_model = embedder
        report.seconds_dense = time.perf_counter() - started

    report.n_docs = len(store)
    now = _now()
    known_files = list(old_manifest.files) if old_manifest else []
    for f in files:
        if str(f.resolve()) not in known_files:
            known_files.append(str(f.resolve()))
    _write_manifest(
        corpus_dir,
        Manifest(
            name=name,
            n_docs=len(store),
            sources=dict(sorted(Counter(o or "(none)" for o in store.origins).items())),
            created=old_manifest.created if old_manifest else now,
            updated=now,
            dense=dense,
            dense_model=dense_model if dense else None,
            n_embedded=n_in_collection if dense else 0,
            files=known_files,
            revision=uuid.uuid4().hex if (changed or report.n_embedded or not old_manifest) else old_manifest.revision,
            bm25={"tokenizer": bm25_index.TOKENIZER_DESCRIPTION, "method": "lucene", "k1": 1.5, "b": 0.75},
        ),
    )
    return report


def _print_problems(console: Console, report: IngestReport) -> None:
    # soft_wrap: one warning per line whatever the terminal width, so file:line stays greppable;
    # escape: messages quote input such as "[1, 2]", which rich would read as markup.
    for problem in report.problems[:_MAX_PRINTED_PROBLEMS]:
        console.print(f"[yellow]warning:[/] {escape(str(problem))} (line skipped)", soft_wrap=True)
    hidden = len(report.problems) - _MAX_PRINTED_PROBLEMS
    if hidden > 0:
        console.print(f"[yellow]warning:[/] {hidden} more malformed lines skipped (see the report)", soft_wrap=True)
    if report.n_duplicates:
        console.print(
            f"note: {report.n_duplicates} records repeat an earlier id; the last occurrence is kept",
            soft_wrap=True,
        )
    for field, count in report.dropped_fields.items():
        console.print(f"note: non-scalar field {escape(repr(field))} not kept ({count} records)", soft_wrap=True)


def _embed(
    corpus_dir: Path,
    store: DocStore,
    changed: set[str],
    embedding_function: Any,
    console: Console,
    progress: bool,
) -> tuple[int, int]:
    client = chroma_store.open_client(corpus_dir)
    try:
        collection = chroma_store.open_collection(client, embedding_function, create=True)
    except ValueError as err:
        # Chroma refuses a different embedding function than the one the collection was built with.
        raise DenseUnavailableError(
            f"{corpus_dir}: the dense index was built with another embedding function ({err}). "
            f"Delete {corpus_dir / chroma_store.CHROMA_DIR} or ingest under a new --name"
        ) from err
    present = chroma_store.existing_ids(collection)
    todo = [doc for doc in store if doc.id not in present or doc.id in changed]
    with _progress(console, progress, bytes_=False) as bar:
        task = bar.add_task("embedding", total=len(todo))
        chroma_store.upsert_docs(
            collection, todo, batch_size=_EMBED_BATCH, on_batch=lambda n: bar.update(task, advance=n)
        )
    return len(todo), int(collection.count())


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def corpus_info(corpus: str | Path) -> CorpusInfo:
    """Size and provenance of one corpus, by NAME or path."""
    folder = resolve_corpus(corpus)
    manifest = read_manifest(folder)
    return CorpusInfo(
        name=manifest.name,
        path=folder,
        n_docs=manifest.n_docs,
        dense=manifest.dense,
        dense_model=manifest.dense_model,
        disk_bytes=_disk_bytes(folder),
        sources=manifest.sources,
        updated=manifest.updated,
    )


def list_corpora() -> list[CorpusInfo]:
    """Every corpus under `$MEDPANEL_HOME/corpora`, sorted by name."""
    return [corpus_info(corpora_root() / name) for name in available_corpora()]
