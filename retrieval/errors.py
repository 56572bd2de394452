"""Errors raised by the retrieval layer.

Retrieval sits below experiments, so it cannot raise the CLI's `UserError`; the CLI converts these.
Each message names the problem and the fix on one line.
"""

from __future__ import annotations


class RetrievalError(Exception):
    """Base class for retrieval problems a user can act on."""


class CorpusNotFoundError(RetrievalError, LookupError):
    """A corpus name or path that does not resolve to an ingested corpus."""


class CorpusInputError(RetrievalError, ValueError):
    """Input files for ingestion are missing or hold no usable record."""


class CorpusDamagedError(RetrievalError):
    """A corpus's own files (manifest, documents, BM25 index) that cannot be read back: damaged,
    truncated, or not regular files. The message names the file and how to rebuild the corpus."""


class DenseUnavailableError(RetrievalError):
    """Dense retrieval was asked for but cannot run (extra missing, corpus not embedded)."""


class SearchBackendError(RetrievalError):
    """A dynamic search backend is misconfigured or its service failed."""


class SourceConfigError(RetrievalError, ValueError):
    """The sources of a run are set up so its conditions cannot mean what they say (the offline
    web is the local corpus, or shares documents with it). `field` names the setting to fix."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


DENSE_EXTRA_HINT = "install with pip install 'medpanel[dense]'"
