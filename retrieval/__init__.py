"""medpanel.retrieval: corpus store (bm25s + ChromaDB), retrievers and fusion, web search
backends and source-quality scoring. Knows nothing of agents or runners.

The names below are imported on first use (PEP 562 `__getattr__`): a run reaches
`medpanel.retrieval.errors` on its way to its first question, and importing every submodule with
the package (the corpus store, httpx for the web search) cost about a fifth of a second of each
process's start, retrieval or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from medpanel.plugins.lazy_names import lazy_names

if TYPE_CHECKING:
    from medpanel.retrieval.corpus import (
        CorpusInfo,
        IngestReport,
        LineProblem,
        Manifest,
        corpus_info,
        ingest,
        list_corpora,
    )
    from medpanel.retrieval.errors import (
        CorpusInputError,
        CorpusNotFoundError,
        DenseUnavailableError,
        RetrievalError,
        SearchBackendError,
        SourceConfigError,
    )
    from medpanel.retrieval.evidence import Evidence, QualityTier
    from medpanel.retrieval.fusion import K_RRF, reciprocal_rank_fusion
    from medpanel.retrieval.home import available_corpora, corpora_root, medpanel_home, resolve_corpus
    from medpanel.retrieval.quality import QUALITY_TABLE, assess_quality, assess_source
    from medpanel.retrieval.quickstart import (
        QUICKSTART_NAME,
        QUICKSTART_WEB_NAME,
        ensure_packaged,
        ensure_quickstart_corpus,
    )
    from medpanel.retrieval.retrievers import (
        RETRIEVER_KINDS,
        BM25Retriever,
        DenseRetriever,
        HybridRetriever,
        Retriever,
        clear_retriever_cache,
        open_retriever,
    )
    from medpanel.retrieval.search import SearchBackend, SnapshotSearch, TavilySearch, check_separate
    from medpanel.retrieval.sources import SOURCES, Source, SourceSpec, open_source, register_source

_MODULE_OF: dict[str, str] = {
    "CorpusInfo": "corpus",
    "IngestReport": "corpus",
    "LineProblem": "corpus",
    "Manifest": "corpus",
    "corpus_info": "corpus",
    "ingest": "corpus",
    "list_corpora": "corpus",
    "CorpusInputError": "errors",
    "CorpusNotFoundError": "errors",
    "DenseUnavailableError": "errors",
    "RetrievalError": "errors",
    "SearchBackendError": "errors",
    "SourceConfigError": "errors",
    "Evidence": "evidence",
    "QualityTier": "evidence",
    "K_RRF": "fusion",
    "reciprocal_rank_fusion": "fusion",
    "available_corpora": "home",
    "corpora_root": "home",
    "medpanel_home": "home",
    "resolve_corpus": "home",
    "QUALITY_TABLE": "quality",
    "assess_quality": "quality",
    "assess_source": "quality",
    "QUICKSTART_NAME": "quickstart",
    "QUICKSTART_WEB_NAME": "quickstart",
    "ensure_packaged": "quickstart",
    "ensure_quickstart_corpus": "quickstart",
    "BM25Retriever": "retrievers",
    "DenseRetriever": "retrievers",
    "HybridRetriever": "retrievers",
    "RETRIEVER_KINDS": "retrievers",
    "Retriever": "retrievers",
    "clear_retriever_cache": "retrievers",
    "open_retriever": "retrievers",
    "SearchBackend": "search",
    "SnapshotSearch": "search",
    "TavilySearch": "search",
    "check_separate": "search",
    "SOURCES": "sources",
    "Source": "sources",
    "SourceSpec": "sources",
    "open_source": "sources",
    "register_source": "sources",
}
"""Each public name's submodule."""


if not TYPE_CHECKING:  # for the type checker the names are the imports above, and a misspelt one an error
    __getattr__, __dir__ = lazy_names(globals(), {name: (f"{__name__}.{module}", name)
                                                  for name, module in _MODULE_OF.items()})


__all__ = [
    "K_RRF",
    "QUALITY_TABLE",
    "QUICKSTART_NAME",
    "QUICKSTART_WEB_NAME",
    "RETRIEVER_KINDS",
    "SOURCES",
    "BM25Retriever",
    "CorpusInfo",
    "CorpusInputError",
    "CorpusNotFoundError",
    "DenseRetriever",
    "DenseUnavailableError",
    "Evidence",
    "HybridRetriever",
    "IngestReport",
    "LineProblem",
    "Manifest",
    "QualityTier",
    "RetrievalError",
    "Retriever",
    "SearchBackend",
    "SearchBackendError",
    "SnapshotSearch",
    "Source",
    "SourceConfigError",
    "SourceSpec",
    "TavilySearch",
    "assess_quality",
    "assess_source",
    "available_corpora",
    "check_separate",
    "clear_retriever_cache",
    "corpora_root",
    "corpus_info",
    "ensure_packaged",
    "ensure_quickstart_corpus",
    "ingest",
    "list_corpora",
    "medpanel_home",
    "open_retriever",
    "open_source",
    "reciprocal_rank_fusion",
    "register_source",
    "resolve_corpus",
]
