"""The ChromaDB side of a corpus: one persistent collection per corpus folder.

Telemetry is off and an explicit embedding function is always passed: Chroma's default embedder
downloads a model at first use, which fails offline (DESIGN.md, known traps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from medpanel.retrieval.docstore import Doc

CHROMA_DIR = "chroma"
COLLECTION = "passages"


def open_client(corpus_dir: Path) -> object:
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(corpus_dir / CHROMA_DIR), settings=Settings(anonymized_telemetry=False))


def open_collection(client: Any, embedding_function: Any, *, create: bool) -> Any:
    """The corpus collection; cosine space so scores read as similarities (1 - distance)."""
    if create:
        return client.get_or_create_collection(
            COLLECTION,
            embedding_function=embedding_function,
            configuration={"hnsw": {"space": "cosine"}},
        )
    return client.get_collection(COLLECTION, embedding_function=embedding_function)


def existing_ids(collection: Any) -> set[str]:
    """Ids already embedded, so a re-ingest embeds only new or changed documents."""
    return set(collection.get(include=[])["ids"])


def _metadata(doc: Doc) -> dict[str, str | int] | None:
    # Chroma rejects None values and empty dicts: keep only what is set.
    meta: dict[str, str | int] = {}
    for key, value in (("title", doc.title), ("source", doc.origin), ("url", doc.url), ("year", doc.year)):
        if value not in (None, ""):
            meta[key] = value
    return meta or None


def upsert_docs(
    collection: Any,
    docs: Sequence[Doc],
    *,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Upsert (embed via the collection's function) in batches; returns the number written."""
    done = 0
    for start in range(0, len(docs), batch_size):
        batch = docs[start : start + batch_size]
        collection.upsert(
            ids=[d.id for d in batch],
            documents=[d.indexed_text() for d in batch],
            metadatas=[_metadata(d) for d in batch],
        )
        done += len(batch)
        if on_batch:
            on_batch(len(batch))
    return done
