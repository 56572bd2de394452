"""The `bm25s` index of a corpus: one tokenizer setting shared by indexing and querying.

Indexing and querying must tokenize identically or query terms silently miss the vocabulary, so
both go through this module. Settings follow bm25s's defaults (Lucene BM25, k1=1.5, b=0.75,
scikit-learn token pattern, lower-casing) with its English stopword list; no stemmer, so the index
needs no extra dependency (recorded in the manifest as `bm25.tokenizer`).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medpanel.inputs import special_kind
from medpanel.retrieval.errors import CorpusDamagedError, CorpusInputError

if TYPE_CHECKING:
    import bm25s

BM25_DIR = "bm25"
STOPWORDS = "en"
TOKENIZER_DESCRIPTION = "bm25s.tokenize(lower=True, stopwords='en', stemmer=None)"



def _bm25s() -> Any:
    """bm25s, imported on first use: it pulls in numpy and scipy, which a run without a corpus never needs."""
    import bm25s

    # bm25s sets its logger to DEBUG and logs "query is empty" per query at INFO; an app that enables
    # INFO logging would get a line per all-stopword query from every thread.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def tokenize_query(query: str) -> list[str]:
    """Query terms as the index saw them (unknown terms are ignored by bm25s at scoring)."""
    tokens = _bm25s().tokenize(query, stopwords=STOPWORDS, return_ids=False, show_progress=False)
    return list(tokens[0]) if tokens else []


def build_index(texts: list[str]) -> bm25s.BM25:
    """Index `texts` in row order (row i of the index = row i of the doc store)."""
    bm25s = _bm25s()
    tokens = bm25s.tokenize(texts, stopwords=STOPWORDS, show_progress=False)
    if not tokens.vocab:  # bm25s would fail on max() of nothing
        raise CorpusInputError("no document holds a word BM25 can index (each is empty, one letter long or "
                               "stopwords only). Ingest documents with text")
    index = bm25s.BM25()
    index.index(tokens, show_progress=False)
    return index


def save_index(index: bm25s.BM25, corpus_dir: Path) -> Path:
    """Save with bm25s's own format; written beside, then swapped in, so a crash keeps the old one."""
    final = corpus_dir / BM25_DIR
    tmp = corpus_dir / f"{BM25_DIR}.tmp"
    old = corpus_dir / f"{BM25_DIR}.old"
    for stale in (tmp, old):
        shutil.rmtree(stale, ignore_errors=True)
    index.save(str(tmp), show_progress=False)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def load_index(corpus_dir: Path) -> bm25s.BM25:
    """Load fully into memory (no mmap): queries then never touch the disk. A damaged index (a file
    truncated, garbled or missing, one that is not a regular file) is a `CorpusDamagedError`
    naming it and the rebuild, never a traceback of bm25s or numpy."""
    folder = corpus_dir / BM25_DIR
    fix = f"Delete {corpus_dir} and ingest its files again (medpanel corpus ingest PATH... --name {corpus_dir.name})"
    if not folder.is_dir() or folder.is_symlink():
        raise CorpusDamagedError(f"{folder}: the BM25 index is missing or not a folder. {fix}")
    for entry in folder.iterdir():
        kind = special_kind(entry)
        if kind is not None or entry.is_symlink():  # a FIFO would hang the load, a link read elsewhere
            raise CorpusDamagedError(f"{entry}: is {kind or 'a link'}, not a file of the BM25 index. {fix}")
    try:
        return _bm25s().BM25.load(str(folder), mmap=False, show_progress=False)
    except Exception as err:  # bm25s, numpy, json and scipy each fail their own way on a damaged file
        name = getattr(err, "filename", None) or folder
        raise CorpusDamagedError(f"{name}: the BM25 index cannot be read ({type(err).__name__}). {fix}") from None
