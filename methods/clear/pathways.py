"""Source-specific candidate generation (paper section 2.2) and the QPIS search of `clear-qpis`.

Each pathway answers on its own, so its provenance stays visible: parametric (the backbone
alone), local (the backbone with `k` passages from the local corpus) and dynamic (the backbone
with `dynamic_k` documents from the search backend, each with a source-quality tier). A pathway
whose retrieval finds nothing still answers, told that nothing was found, so every condition asks
the same calls; the verifier sees the document counts. The baselines reuse these calls verbatim
(`direct` = parametric, `rag-*` = local, `online` = dynamic), so one run's response cache answers
a baseline and the matching CLEAR pathway once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from medpanel.agents.evidence import instruction_like, passages_block
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import question_block
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.methods.clear.bundle import Candidate, evidence_key
from medpanel.methods.clear.quality import counts, deterministic, quality_block
from medpanel.methods.clear.roles import candidate
from medpanel.methods.clear.roles.assessor import llm_assess
from medpanel.methods.clear.roles.planner import Planner
from medpanel.methods.clear.settings import ClearSettings, Mode, Pathway
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.sources import SourceSpec


@dataclass
class Context:
    """Everything one question's CLEAR run shares."""

    session: QuestionSession
    question: Question
    settings: ClearSettings
    mode: Mode
    local: Any
    """`.search(query, k) -> list[Evidence]` over the local corpus (a `Source`, or a test's fake)."""
    dynamic: Any
    """`.search(query, k) -> list[Evidence]` of the web source."""
    web: SourceSpec
    """What the dynamic pathway searches, as its provenance records it."""
    assessor: QuestionSession | None = None
    """The second model's session (`clear-dual`); its calls land in the same transcript."""
    searches: list[dict[str, Any]] = field(default_factory=list)
    """Every retrieval or search issued, in order (the free-text adapter must add none)."""
    query: str | None = None
    """A query for the local and dynamic searches instead of the question (CLEAR as a panel's
    evidence channel searches for the gap the Knowledge Gate named)."""

    @property
    def freetext(self) -> bool:
        return not self.question.options

    @property
    def follow_up(self) -> bool:
        return self.settings.follow_up if self.mode.follow_up is None else self.mode.follow_up

    @property
    def retriever(self) -> str:
        return self.mode.retriever or self.settings.retriever

    async def search(self, kind: str, query: str, k: int, *, step: str, round: int = 0,
                     purpose: str = "") -> list[Evidence]:
        backend = self.local if kind == "local" else self.dynamic
        hits = list(await asyncio.to_thread(backend.search, query, k))
        self.searches.append({"kind": kind, "step": step, "query": query})
        self.session.record(TranscriptEvent(
            kind="note", role="retrieval", agent=f"{kind}_search", step=step, round=round,
            content=f"query: {query}" + ("" if hits else " (nothing found)"),
            data={"kind": kind, "purpose": purpose, "query": query, "k": k,
                  "retrieved": [e.doc_id for e in hits], "evidence": [e.model_dump(mode="json") for e in hits],
                  "instruction_like": [e.doc_id for e in hits if instruction_like(e.text)]}))
        return hits


def local_query(q: Question) -> str:
    return q.text[:500]


def dynamic_query(q: Question) -> str:
    # Option text helps a web-like search find the distinguishing facts; engines cap query length.
    return " ".join([q.text, *q.options.values()])[:400]


async def _answer(ctx: Context, pathway: Pathway, prompt: str, evidence: list[Evidence],
                  provenance: dict[str, Any]) -> Candidate:
    answer, reasoning = await candidate.answer(ctx.session, ctx.question, pathway, prompt)
    return Candidate(pathway=pathway, answer=answer, reasoning=reasoning,
                     evidence=evidence, provenance={"pathway": pathway, "model": ctx.session.spec.model_name,
                                                    **provenance})


async def parametric(ctx: Context) -> Candidate:
    return await _answer(ctx, "parametric", question_block(ctx.question), [], {"evidence": "none (parametric)"})


async def local(ctx: Context) -> Candidate:
    s = ctx.settings
    passages = await ctx.search("local", ctx.query or local_query(ctx.question), s.k, step="local_retrieval")
    prompt = candidate.local_request(passages=passages_block(passages, s.passage_chars), found=len(passages),
                                     question=question_block(ctx.question))
    return await _answer(ctx, "local", prompt, passages,
                         {"corpus": s.corpus, "retriever": ctx.retriever, "k": s.k,
                          "doc_ids": [e.doc_id for e in passages]})


async def assess(ctx: Context, docs: list[Evidence], *, step: str, round: int = 0) -> tuple[list[Evidence],
                                                                                           dict[str, Any]]:
    """AssessQuality(q, E, P): the domain table's priors, then one labelling call (the second model
    in `dual`) unless `llm_quality: false`."""
    docs = deterministic(docs)
    record: dict[str, Any] = {"rule": "llm labels, domain-table priors" if ctx.settings.llm_quality or ctx.mode.dual
                              else "domain table", "deterministic": counts(docs)}
    if ctx.settings.llm_quality or ctx.mode.dual:
        session = ctx.assessor if ctx.mode.dual and ctx.assessor is not None else ctx.session
        result = await llm_assess(session, question_block(ctx.question), docs,
                                  chars=ctx.settings.verifier_passage_chars, step=step, round=round)
        docs = result.evidence
        record.update(result.record)
    record["final"] = counts(docs)
    return docs, record


async def dynamic_documents(ctx: Context) -> tuple[list[Evidence], dict[str, Any]]:
    s = ctx.settings
    if ctx.mode.qpis:
        docs, plan = await qpis_search(ctx)
    else:
        docs = await ctx.search("dynamic", ctx.query or dynamic_query(ctx.question), s.dynamic_k,
                                step="dynamic_search")
        plan = {}
    docs, record = await assess(ctx, docs, step="assess_quality")
    if plan:
        record["qpis"] = plan
    ctx.session.record(TranscriptEvent(kind="note", role="assessor", agent="source_quality", step="source_quality",
                                       content=" ".join(f"{k}={v}" for k, v in counts(docs).items()),
                                       data={**record, "tiers": {e.doc_id: e.quality for e in docs}}))
    return docs, record


async def dynamic(ctx: Context, docs: list[Evidence], record: dict[str, Any]) -> Candidate:
    s = ctx.settings
    prompt = candidate.dynamic_request(passages=passages_block(docs, s.passage_chars), quality=quality_block(docs),
                                       found=len(docs), question=question_block(ctx.question))
    return await _answer(ctx, "dynamic", prompt, docs,
                         {"backend": ctx.web.kind, "snapshot_corpus": ctx.web.corpus, "k": s.dynamic_k,
                          "qpis": ctx.mode.qpis,
                          "urls": [e.url for e in docs], **counts(docs)})


async def qpis_search(ctx: Context) -> tuple[list[Evidence], dict[str, Any]]:
    """Query planning and iterative search: sub-queries, then rounds until sufficient or a bound."""
    s = ctx.settings
    planner = Planner(ctx.session, ctx.question, n=s.qpis_max_queries)
    queries = _clean(await planner.plan(), set(), s.qpis_max_queries)
    record: dict[str, Any] = {"plan_valid": bool(queries), "rounds": []}
    if not queries:
        queries = [dynamic_query(ctx.question)]  # an invalid plan degrades to the default search
    asked: set[str] = set()
    docs: list[Evidence] = []
    seen: set[str] = set()
    stop = "max_rounds"
    for rnd in range(1, s.qpis_max_rounds + 1):
        for query in queries:
            asked.add(query.lower())
            for ev in await ctx.search("dynamic", query, s.dynamic_k, step="qpis_search", round=rnd,
                                       purpose="qpis"):
                if evidence_key(ev) not in seen:
                    seen.add(evidence_key(ev))
                    docs.append(ev)
        record["rounds"].append({"round": rnd, "queries": queries, "docs": len(docs)})
        if len(docs) >= s.qpis_max_docs:
            stop = "max_docs"
            break
        if rnd == s.qpis_max_rounds:
            break
        check = await planner.check(docs, chars=s.verifier_passage_chars, round=rnd)
        if check is None:
            stop = "sufficiency_invalid"
            break
        if check.sufficient:
            stop = "sufficient"
            break
        queries = _clean(check.next_queries, asked, s.qpis_max_queries)
        if not queries:
            stop = "no_new_queries"
            break
    record["stop"] = stop
    return docs[: s.qpis_max_docs], record


def _clean(queries: list[str], asked: set[str], n: int) -> list[str]:
    out: list[str] = []
    for query in queries:
        query = " ".join(str(query).split())[:400]
        if query and query.lower() not in asked and query.lower() not in {o.lower() for o in out}:
            out.append(query)
    return out[:n]
