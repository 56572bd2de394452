"""medpanel.retrieval: corpus store (bm25s + ChromaDB), retrievers and fusion, web search
backends and source-quality scoring. Knows nothing of agents or runners."""

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
