"""Retrievers over an ingested corpus, all behind `Retriever.search(query, k) -> list[Evidence]`.

- `BM25Retriever` (the default, as in both papers): bm25s over the corpus's saved index.
- `DenseRetriever`: the corpus's ChromaDB collection (needs a dense ingest).
- `HybridRetriever`: reciprocal rank fusion of the two (`medpanel.retrieval.fusion`, k_rrf=60).

`open_retriever(corpus, kind)` resolves a corpus by NAME or path and caches the loaded retriever per
process: a run's worker threads all open the same corpus, and loading (index + documents) costs
far more than a query. Loaded retrievers are read-only and safe for concurrent `search` calls.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from medpanel.retrieval import bm25_index, chroma_store
from medpanel.retrieval.corpus import Manifest, read_manifest
from medpanel.retrieval.docstore import DocStore
from medpanel.retrieval.errors import DenseUnavailableError, RetrievalError
from medpanel.retrieval.evidence import Evidence, QualityTier, RetrieverName
from medpanel.retrieval.fusion import K_RRF, reciprocal_rank_fusion
from medpanel.retrieval.home import resolve_corpus
from medpanel.retrieval.quality import assess_source
from medpanel.retrieval.quickstart import PACKAGED, ensure_packaged

RETRIEVER_KINDS: tuple[str, ...] = ("bm25", "dense", "hybrid")
HYBRID_DEPTH = 50
"""Candidates taken from each retriever before fusion (at least k)."""


@runtime_checkable
class Retriever(Protocol):
    """Anything that turns a query into ranked `Evidence` (fakes in tests satisfy it too)."""

    kind: str

    def search(self, query: str, k: int) -> list[Evidence]:
        """Up to k passages, best first, ranks 1..n."""
        ...


def evidence_from_row(
    store: DocStore, row: int, *, corpus: str, score: float, rank: int, retriever: RetrieverName
) -> Evidence:
    """Evidence with the corpus record's provenance; quality is judged only where a URL exists."""
    url = store.urls[row]
    title = store.titles[row]
    quality: QualityTier | None = None
    flags: list[str] = []
    if url:
        quality, flags = assess_source(url, title, store.contents[row])
    return Evidence(
        text=store.contents[row],
        title=title,
        doc_id=store.ids[row],
        source=corpus,
        url=url,
        year=store.years[row],
        score=score,
        retriever=retriever,
        rank=rank,
        quality=quality,
        flags=flags,
    )


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


class BM25Retriever:
    """bm25s over a corpus folder; the index and documents are held in memory."""

    kind = "bm25"

    def __init__(self, corpus_dir: Path, *, store: DocStore | None = None, manifest: Manifest | None = None):
        self.corpus_dir = corpus_dir
        self.manifest = manifest or read_manifest(corpus_dir)
        self.store = store if store is not None else DocStore.load(corpus_dir)
        self._index = bm25_index.load_index(corpus_dir)
        self._n = len(self.store)

    def search(self, query: str, k: int) -> list[Evidence]:
        _check_k(k)
        tokens = bm25_index.tokenize_query(query)
        if not tokens:
            return []  # all stopwords: every score would be 0, any order arbitrary
        # retrieve() with n_threads=0 only reads the index arrays: concurrent readers need no lock.
        rows, scores = self._index.retrieve(
            [tokens], k=min(k, self._n), show_progress=False, n_threads=0, return_as="tuple"
        )
        hits: list[Evidence] = []
        for row, score in zip(rows[0].tolist(), scores[0].tolist(), strict=True):
            if score <= 0.0:
                break  # sorted: the rest share no term with the query
            hits.append(
                evidence_from_row(
                    self.store,
                    row,
                    corpus=self.manifest.name,
                    score=score,
                    rank=len(hits) + 1,
                    retriever="bm25",
                )
            )
        return hits


class DenseRetriever:
    """Cosine search over the corpus's ChromaDB collection; score = 1 - cosine distance."""

    kind = "dense"

    def __init__(
        self,
        corpus_dir: Path,
        *,
        embedding_function: Any | None = None,
        store: DocStore | None = None,
        manifest: Manifest | None = None,
    ):
        self.corpus_dir = corpus_dir
        self.manifest = manifest or read_manifest(corpus_dir)
        if not self.manifest.dense:
            raise DenseUnavailableError(
                f"corpus {self.manifest.name!r} has no dense index. Re-ingest with: "
                f"medpanel corpus ingest PATH... --name {self.manifest.name} --dense"
            )
        if embedding_function is None:
            # Optional heavy dependency: the [dense] extra (torch, sentence-transformers) behind
            # chromadb's embedding types, imported only when a dense retriever opens.
            from medpanel.retrieval.embedding import MINILM_MODEL, default_embedding_function

            if self.manifest.dense_model != MINILM_MODEL:
                raise DenseUnavailableError(
                    f"corpus {self.manifest.name!r} was embedded with {self.manifest.dense_model!r}; "
                    "pass that embedding_function to open_retriever"
                )
            embedding_function = default_embedding_function()
        self.store = store if store is not None else DocStore.load(corpus_dir)
        self._client = chroma_store.open_client(corpus_dir)
        try:
            self._collection = chroma_store.open_collection(self._client, embedding_function, create=False)
        except ValueError as err:
            raise DenseUnavailableError(f"corpus {self.manifest.name!r}: {err}") from err
        self._n = int(self._collection.count())

    def search(self, query: str, k: int) -> list[Evidence]:
        _check_k(k)
        if not query.strip() or self._n == 0:
            return []
        result = self._collection.query(query_texts=[query], n_results=min(k, self._n), include=["distances"])
        hits: list[Evidence] = []
        for doc_id, distance in zip(result["ids"][0], result["distances"][0], strict=True):
            row = self.store.row_of.get(doc_id)
            if row is None:
                continue  # embedded but no longer in the store: never surface text we cannot cite
            hits.append(
                evidence_from_row(
                    self.store,
                    row,
                    corpus=self.manifest.name,
                    score=1.0 - float(distance),
                    rank=len(hits) + 1,
                    retriever="dense",
                )
            )
        return hits


class HybridRetriever:
    """Reciprocal rank fusion of a lexical and a semantic retriever (k_rrf=60 by default).

    Each retriever contributes its top `max(k, depth)` hits; fused score = sum of 1/(k_rrf + rank).
    """

    kind = "hybrid"

    def __init__(self, *retrievers: Retriever, depth: int = HYBRID_DEPTH, k_rrf: int = K_RRF):
        if len(retrievers) < 2:
            raise ValueError("hybrid retrieval needs at least two retrievers")
        self.retrievers = retrievers
        self.depth = depth
        self.k_rrf = k_rrf

    def search(self, query: str, k: int) -> list[Evidence]:
        _check_k(k)
        depth = max(k, self.depth)
        lists = [r.search(query, depth) for r in self.retrievers]
        first_seen: dict[str, Evidence] = {}
        for hits in lists:
            for hit in hits:
                first_seen.setdefault(hit.doc_id, hit)
        fused = reciprocal_rank_fusion([[h.doc_id for h in hits] for hits in lists], k_rrf=self.k_rrf)
        return [
            first_seen[doc_id].model_copy(update={"score": score, "rank": rank, "retriever": "hybrid"})
            for rank, (doc_id, score) in enumerate(fused[:k], start=1)
        ]


# One lock for loading: when W workers open the same corpus at once, one loads and the rest
# wait for the cached result instead of each loading their own copy.
_LOAD_LOCK = threading.RLock()


@lru_cache(maxsize=16)
def _cached_store(corpus_dir: Path, revision: str) -> DocStore:
    return DocStore.load(corpus_dir)


@lru_cache(maxsize=32)
def _cached_retriever(corpus_dir: Path, kind: str, revision: str) -> Retriever:
    store = _cached_store(corpus_dir, revision)
    if kind == "bm25":
        return BM25Retriever(corpus_dir, store=store)
    if kind == "dense":
        return DenseRetriever(corpus_dir, store=store)
    return HybridRetriever(
        _cached_retriever(corpus_dir, "bm25", revision), _cached_retriever(corpus_dir, "dense", revision)
    )


def open_retriever(corpus: str | Path, kind: str = "bm25", *, embedding_function: object | None = None) -> Retriever:
    """A retriever over corpus NAME (under `$MEDPANEL_HOME/corpora`) or a corpus folder path.

    `quickstart` and `quickstart-web` are ingested from the packaged files on first use.

    Cached per process by (folder, kind, manifest revision), so a re-ingest is picked up. Passing an
    `embedding_function` (tests, custom embedders) bypasses the cache.
    """
    if kind not in RETRIEVER_KINDS:
        raise RetrievalError(f"unknown retriever {kind!r}: choose one of {', '.join(RETRIEVER_KINDS)}")
    if isinstance(corpus, str) and corpus in PACKAGED:
        ensure_packaged(corpus)  # the packaged corpora are there on first use, no ingest step
    folder = resolve_corpus(corpus)
    if embedding_function is not None:
        if kind == "bm25":
            return BM25Retriever(folder)
        dense = DenseRetriever(folder, embedding_function=embedding_function)
        return dense if kind == "dense" else HybridRetriever(BM25Retriever(folder, store=dense.store), dense)
    revision = read_manifest(folder).revision
    with _LOAD_LOCK:
        return _cached_retriever(folder, kind, revision)


def clear_retriever_cache() -> None:
    """Drop every cached retriever and document store (frees their memory)."""
    with _LOAD_LOCK:
        _cached_retriever.cache_clear()
        _cached_store.cache_clear()
