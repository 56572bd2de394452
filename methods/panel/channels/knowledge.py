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
from typing import Any

from medpanel.agents.events import Brief as BriefGiven
from medpanel.agents.evidence import instruction_like, quote_block
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.types import Question, TranscriptEvent

# The channel's settings and facts (what a report reads of a run) live in `knowledge_settings`,
# apart from the agents and retrieval that run it; they are re-exported here, where they always were.
from medpanel.methods.panel.channels.knowledge_settings import KnowledgeFacts as KnowledgeFacts
from medpanel.methods.panel.channels.knowledge_settings import KnowledgeSettings as KnowledgeSettings
from medpanel.methods.panel.channels.knowledge_settings import Timing as Timing
from medpanel.methods.panel.roles import curator, knowledge_gate
from medpanel.methods.panel.roles.challenger import Critique
from medpanel.methods.panel.roles.knowledge_gate import GateDecision
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.sources import open_source


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

