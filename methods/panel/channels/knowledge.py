"""Knowledge recruitment: the Knowledge Gate, retrieval, and the Evidence Curator's brief.

The gate decides whether the current reasoning gap is addressable by retrieval and, if so, writes a
narrow query (paper section 3.2). Retrieval returns `k` passages with provenance; the curator keeps
the factual, non-redundant ones that address the gap and writes a brief of 5 to 8 cited points.
Evidence always reaches a model as quoted data between tags, never as instructions.

Timing (the paper's Table 1): `upfront` retrieves before any reasoning with the question as the
query; `between_blind` after the initial trace with a gate that sees the agents' state only;
`between_gap` after the initial trace with a gate that also sees the Challenger's diagnosis.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from medpanel.agents.events import Brief as BriefGiven
from medpanel.agents.evidence import instruction_like, quote_block
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.settings import PipelineSettings
from medpanel.agents.summary import Summary
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.methods.panel.roles import curator, knowledge_gate
from medpanel.methods.panel.roles.challenger import Critique
from medpanel.methods.panel.roles.knowledge_gate import GateDecision
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.quickstart import web_corpus_for
from medpanel.retrieval.sources import OFFLINE_WEB, CorpusSource, SourceSpec, open_source, source_class

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


@dataclass
class BriefResult:
    """One use of the channel: what was asked, found and written, and who received it."""

    query: str
    gap: str
    passages: list[Evidence]
    points: list[dict[str, Any]]
    event: TranscriptEvent
    received_by: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The brief as quoted data for an agent's prompt."""
        lines = []
        for i, p in enumerate(self.points, 1):
            cites = ", ".join(f"P{n}" for n in p["sources"])
            lines.append(f"{i}. {p['point']}" + (f" [{cites}]" if cites else ""))
        refs = []
        for n in sorted({n for p in self.points for n in p["sources"]}):
            ev = self.passages[n - 1]
            refs.append(f"P{n}: {ev.citation()}")
        body = "\n".join(lines) + ("\nSources:\n" + "\n".join(refs) if refs else "")
        return quote_block("evidence_brief", body)

    def deliver(self, names: list[str]) -> None:
        self.received_by.extend(n for n in names if n not in self.received_by)
        self.event.data["received_by"] = list(self.received_by)
        if isinstance(self.event.act, BriefGiven):
            self.event.act = self.event.act.model_copy(update={"received_by": tuple(self.received_by)})


def prepare(settings: KnowledgeSettings) -> None:
    """Open the corpus once before workers start: a missing corpus fails the run at once, clearly."""
    open_source(settings.spec()).open()


class KnowledgeChannel:
    """The gate -> retrieval -> curator path for one question."""

    def __init__(self, session: QuestionSession, question: Question, settings: KnowledgeSettings) -> None:
        self.session = session
        self.question = question
        self.settings = settings
        self.source = open_source(settings.spec())
        self.results: list[BriefResult] = []
        """Briefs written (a search found passages and the curator's brief was valid)."""
        self.queries: list[str] = []
        """Every query written: the gate's when it fired, the question text for `upfront`."""
        self.found: list[int] = []
        """Passages returned by each search, in order."""
        self.passage_chars = session.spec.accommodation("passage_chars", settings.passage_chars)
        """The passage length in force: the setting, else the backend's accommodation (none but local)."""

    async def gate(self, state: str, critique: Critique | None, *, round: int, turn: int) -> GateDecision | None:
        return await knowledge_gate.decide(self.session, self.question, state, critique, round=round, turn=turn)

    async def retrieve_and_curate(self, query: str, gap: str, *, round: int, turn: int,
                                  trigger: str) -> BriefResult | None:
        passages = await asyncio.to_thread(self.source.search, query, self.settings.k)
        self.found.append(len(passages))
        event = TranscriptEvent(kind="note", role="curator", agent="evidence_curator", step="brief", round=round,
                                turn=turn, content=f"query: {query}",
                                data={"trigger": trigger, "query": query, "gap": gap,
                                      "retrieved": [e.doc_id for e in passages],
                                      "evidence": [e.model_dump(mode="json") for e in passages],
                                      "instruction_like": [e.doc_id for e in passages if instruction_like(e.text)],
                                      "received_by": []},
                                act=BriefGiven(trigger=trigger))
        if not passages:
            event.content += " (no passages found)"
            self.session.record(event)
            return None
        brief = await curator.curate(self.session, self.question, gap or query, passages, chars=self.passage_chars,
                                     round=round, turn=turn)
        if brief is None:
            event.content += " (the curator's brief was invalid; nothing delivered)"
            self.session.record(event)
            return None
        points = [{"point": p.point, "sources": sorted({n for n in p.sources if 1 <= n <= len(passages)})}
                  for p in brief.points]
        event.data["brief"] = points
        self.session.record(event)
        result = BriefResult(query=query, gap=gap, passages=passages, points=points, event=event)
        self.results.append(result)
        return result

    async def upfront(self) -> BriefResult | None:
        """Unconditional retrieval before reasoning; the question text is the query."""
        query = self.question.text[:500]
        self.queries.append(query)
        return await self.retrieve_and_curate(query, "", round=0, turn=0, trigger="upfront")

    async def between(self, state: str, critique: Critique | None, *, blind: bool, round: int = 0,
                      turn: int = 0) -> BriefResult | None:
        """After a reasoning step: the gate decides, seeing the critique unless `blind`."""
        decision = await self.gate(state, None if blind else critique, round=round, turn=turn)
        fired = bool(decision and decision.retrieve and decision.query.strip())
        self.session.record(TranscriptEvent(
            kind="note", role="knowledge_gate", agent="knowledge_gate", step="gate_decision", round=round, turn=turn,
            content=f"retrieve: {decision.query}" if fired and decision else "no retrieval",
            data={"fired": fired, "blind": blind, "query": decision.query if decision else None,
                  "gap": decision.knowledge_gap if decision else None, "valid": decision is not None}))
        if not fired or decision is None:
            return None
        self.queries.append(decision.query.strip())
        return await self.retrieve_and_curate(decision.query.strip(), decision.knowledge_gap, round=round, turn=turn,
                                              trigger="between_blind" if blind else "between_gap")

    def facts(self) -> KnowledgeFacts:
        """Four separate facts, since each can happen without the next: a query was written (the
        gate fired), a search returned passages, a brief was written, and who received it."""
        return KnowledgeFacts(
            gate_fired=bool(self.queries),
            queries_written=len(self.queries),
            queries=list(self.queries),
            searches=len(self.found),
            retrievals=sum(1 for n in self.found if n),
            passages_retrieved=sum(self.found),
            briefs_written=len(self.results),
            briefs_delivered=sum(1 for r in self.results if r.received_by),
            brief_received_by=sorted({n for r in self.results for n in r.received_by}),
        )

