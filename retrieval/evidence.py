"""`Evidence`: one retrieved passage and where it came from.

Every retriever and search backend returns these, so the agents above never need to know which
index or web service produced a passage. The type lives here, at the lowest layer that needs it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

QualityTier = Literal["high", "medium", "low"]
RetrieverName = str
"""A retriever (bm25, dense, hybrid) or a source kind (snapshot, or any registered web source)."""


class Evidence(BaseModel):
    """A passage with its provenance, as handed to the Knowledge Gate, the curator and CLEAR."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    """The passage itself (a corpus chunk or a web result's content snippet)."""

    title: str
    """Title of the document the passage belongs to (may be empty for untitled web pages)."""

    doc_id: str
    """Stable id: the corpus record's `id`, or the URL for web results."""

    source: str
    """Where it came from: the corpus name (e.g. `quickstart`, `medquad`) or `"web"`."""

    url: str | None = None
    """Address of the original document, when known."""

    year: int | None = None
    """Publication year, when known (PubMed records, dated web results)."""

    score: float
    """The retriever's own score (BM25 score, cosine similarity, or fused RRF score); only
    comparable within one result list."""

    retriever: RetrieverName
    """Which retriever or search backend produced the hit."""

    rank: int = Field(ge=1)
    """1-based position in the result list it was returned in."""

    quality: QualityTier | None = None
    """Source-quality tier from `medpanel.retrieval.quality`; None when the passage has no URL to
    judge (curated corpora such as the quickstart set)."""

    flags: list[str] = Field(default_factory=list)
    """Free-form warnings about the source (e.g. `preprint`, `retracted`)."""

    def citation(self) -> str:
        """Short human-readable provenance line: `[doc_id] title (source, year) url`."""
        where = ", ".join(str(p) for p in (self.source, self.year) if p)
        tail = f" {self.url}" if self.url else ""
        return f"[{self.doc_id}] {self.title} ({where}){tail}"
