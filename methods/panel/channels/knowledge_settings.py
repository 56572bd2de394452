"""The knowledge channel's settings (`KnowledgeSettings`, every retrieving pipeline's), its timing
and the facts it records per question (`KnowledgeFacts`): what a run's settings and a report read,
apart from the channel's agents and retrieval (`knowledge`), which only a run imports."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from medpanel.agents.settings import PipelineSettings
from medpanel.agents.summary import Summary
from medpanel.retrieval.quickstart import web_corpus_for
from medpanel.retrieval.sources import OFFLINE_WEB, CorpusSource, SourceSpec, source_class

Timing = Literal["none", "upfront", "between_blind", "between_gap"]

class KnowledgeFacts(Summary):
    """What the knowledge channel did for one question: four facts counted apart, since each can
    happen without the next (a query was written, a search returned passages, a brief was written,
    who received it). All unset when the condition did not use the channel."""

    gate_fired: bool | None = None
    queries_written: int | None = None
    queries: list[str] | None = None
    searches: int | None = None
    retrievals: int | None = None
    passages_retrieved: int | None = None
    briefs_written: int | None = None
    briefs_delivered: int | None = None
    brief_received_by: list[str] | None = None
    clear_routes: list[str | None] | None = None
    """CLEAR as the panel's channel: the route of each adjudication."""
    clear_guard: list[str | None] | None = None
    """CLEAR as the panel's channel: the override guard's outcome of each adjudication."""

    @property
    def used_channel(self) -> bool:
        return self.queries_written is not None


class KnowledgeSettings(PipelineSettings):
    """Settings of the knowledge channel, shared by every pipeline that can retrieve."""

    corpus: str = "quickstart"
    """Local corpus NAME (under $MEDPANEL_HOME/corpora) or folder. `quickstart` is built in and
    ingested on first use; ingest others with `medpanel corpus ingest`."""
    retriever: Literal["bm25", "dense", "hybrid"] = "bm25"
    """BM25 (both papers), dense (MiniLM in ChromaDB; the `dense` extra) or their reciprocal rank fusion."""
    source: str = "corpus"
    """Where the channel's evidence comes from: a registered source (`medpanel.retrieval.sources`):
    `corpus` (the local corpus), `snapshot` (the offline web: the URL-bearing corpus `web_corpus`),
    `tavily` (live web search; needs TAVILY_API_KEY), or `module:Class` for your own."""
    web_corpus: str | None = None
    """The offline web (`source: snapshot`, and the web pathway of CLEAR as the panel's channel): a
    URL-bearing corpus of its own, never the local `corpus`. Default: the packaged `quickstart-web`
    when `corpus` is `quickstart`; required otherwise."""
    k: int = Field(default=16, ge=1, le=100)
    """Passages retrieved per query (both papers use 16)."""
    timing: Timing = "between_gap"
    """When `k: 1` retrieves: upfront, between_blind or between_gap (challenger-aware)."""
    passage_chars: int | None = Field(default=None, ge=100)
    """Characters of each passage shown to the curator. Unset: the backend's default, which cuts
    only for the embedded model (600; MedRAG chunks are ~1,000) and shows whole passages elsewhere."""


    @property
    def snapshot_corpus(self) -> str:
        web = web_corpus_for(self.corpus, self.web_corpus)
        if web is None:
            raise ValueError(f"the offline web needs a corpus of its own: set settings.web_corpus to a URL-bearing "
                             f"corpus other than the local {self.corpus!r} (docs/methods/knowledge.md: "
                             "Retrieval corpora)")
        return web

    @field_validator("source")
    @classmethod
    def _known_source(cls, v: str) -> str:
        source_class(v)  # raises (a ValueError) naming the known kinds
        return v

    @model_validator(mode="after")
    def _web_is_named(self) -> KnowledgeSettings:
        kind = source_class(self.source)
        if kind.web and kind.needs_corpus:
            _ = self.snapshot_corpus  # raises when the offline web cannot be resolved
        return self

    def spec(self) -> SourceSpec:
        """The channel's own source."""
        kind = source_class(self.source)
        corpus = (self.snapshot_corpus if kind.web else self.corpus) if kind.needs_corpus else None
        return SourceSpec(kind=self.source, corpus=corpus, retriever=self.retriever)

    def local_spec(self) -> SourceSpec:
        """The local corpus (CLEAR's local pathway when CLEAR is the panel's channel)."""
        return SourceSpec(kind=CorpusSource.kind, corpus=self.corpus, retriever=self.retriever)

    def web_spec(self) -> SourceSpec:
        """The web (CLEAR's dynamic pathway as the panel's channel): the channel's own source when it is a
        web source, else the offline web of `web_corpus`."""
        if source_class(self.source).web:
            return self.spec()
        return SourceSpec(kind=OFFLINE_WEB, corpus=self.snapshot_corpus, retriever=self.retriever)
