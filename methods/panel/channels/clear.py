"""CLEAR as the panel's evidence channel (`settings.k_source: clear`).

When the Knowledge Gate fires, CLEAR adjudicates three candidates for the gap it named instead of
the curator summarising one corpus:

- *parametric* is the panel's own current position (its majority letter): what the team believes
  without new evidence;
- *local* answers with the corpus passages retrieved for the gap's query;
- *dynamic* answers with web documents (offline snapshot or Tavily) for the same query, each with
  its source-quality tier.

CLEAR's verifier, override guard and challenge audit then run unchanged, so a web source without a
single high-quality document cannot overturn a panel that the corpus agrees with: the guard rejects
the override and the route becomes `keep_local`. The brief the panel receives carries the route,
the rationale and the evidence with provenance and quality tiers, never a recommended letter.
"""

from __future__ import annotations

from typing import cast

from medpanel.agents.events import Brief as BriefGiven
from medpanel.agents.types import TranscriptEvent
from medpanel.methods.clear.adjudication import Decision, adjudicate
from medpanel.methods.clear.bundle import Candidate
from medpanel.methods.clear.pathways import Context
from medpanel.methods.clear.settings import ClearSettings, mode_of
from medpanel.methods.panel.channels.knowledge import BriefResult, KnowledgeChannel, KnowledgeFacts, KnowledgeSettings
from medpanel.retrieval.errors import SourceConfigError
from medpanel.retrieval.quickstart import web_corpus_for
from medpanel.retrieval.search import check_separate
from medpanel.retrieval.sources import open_source, source_class


class ClearChannel(KnowledgeChannel):
    """A `KnowledgeChannel` whose retrieval step is a CLEAR adjudication over the gap's query."""

    panel_answer: tuple[str, ...] | None = None
    """Set by the panel before each use: its current majority position."""

    def clear_settings(self) -> ClearSettings:
        """CLEAR's knobs for the channel: the panel's corpus, retriever, `k` and passage length (in force
        for the backend); its sources come from the panel's settings (`local_spec`, `web_spec`)."""
        s = self.settings
        return ClearSettings(corpus=s.corpus, retriever=s.retriever, k=s.k, dynamic_k=min(s.k, 8),
                             passage_chars=self.passage_chars).for_backend(self.session.spec)

    async def retrieve_and_curate(self, query: str, gap: str, *, round: int, turn: int,
                                  trigger: str) -> BriefResult | None:
        cs = self.clear_settings()
        web = self.settings.web_spec()
        ctx = Context(session=self.session, question=self.question, settings=cs, mode=mode_of("clear-default"),
                      local=open_source(self.settings.local_spec()), dynamic=open_source(web), web=web, query=query)
        panel = Candidate(pathway="parametric", answer=self.panel_answer,
                          reasoning="The panel's current majority position.",
                          provenance={"pathway": "panel consensus"})
        decision = await adjudicate(ctx, panel)
        passages = [*decision.bundle.local, *decision.bundle.dynamic]
        self.found.append(len(passages))
        points = brief_points(decision, len(decision.bundle.local))
        event = TranscriptEvent(kind="note", role="curator", agent="clear_channel", step="brief", round=round,
                                turn=turn, content=f"query: {query} -> route {decision.route}",
                                data={"trigger": trigger, "query": query, "gap": gap, "source": "clear",
                                      "panel_answer": list(self.panel_answer or ()),
                                      "route": decision.route, "rationale": decision.rationale,
                                      "guard": decision.guard, "audit": decision.audit,
                                      "candidates": {p: list(c.answer) if c.answer else None
                                                     for p, c in decision.bundle.candidates.items()},
                                      "retrieved": [e.doc_id for e in passages],
                                      "evidence": [e.model_dump(mode="json") for e in passages],
                                      "brief": points, "received_by": []},
                                act=BriefGiven(trigger=trigger, source="clear", route=decision.route,
                                               guard=str(decision.guard.get("outcome", "not_triggered"))))
        self.session.record(event)
        if not passages:
            return None
        result = BriefResult(query=query, gap=gap, passages=passages, points=points, event=event)
        self.results.append(result)
        return result

    def facts(self) -> KnowledgeFacts:
        out = super().facts()
        # The event's data holds what `brief` wrote above: the route's name and the guard's record.
        out.clear_routes = [cast("str | None", r.event.data.get("route")) for r in self.results]
        out.clear_guard = [cast("dict[str, str | None]", r.event.data.get("guard", {})).get("outcome")
                           for r in self.results]
        return out


def prepare_channel(settings: KnowledgeSettings) -> None:
    """Open both sources once, and refuse an offline web that is (or shares documents with) the
    local corpus, before any worker starts."""
    kind = source_class(settings.source)
    if not kind.web or kind.needs_corpus:  # not a live search: the web is an offline corpus of its own
        web = web_corpus_for(settings.corpus, settings.web_corpus)
        if web is None:
            raise SourceConfigError(f"the offline web needs a corpus of its own: set it to a URL-bearing corpus other "
                                    f"than the local {settings.corpus!r} (docs/methods/knowledge.md: Retrieval "
                                    "corpora)",
                                    field="settings.web_corpus")
        check_separate(settings.corpus, web, field="settings.web_corpus")
    open_source(settings.local_spec()).open()
    open_source(settings.web_spec()).open()


def brief_points(decision: Decision, n_local: int, per_source: int = 3) -> list[dict[str, object]]:
    """The adjudication as brief points: route and rationale first, then cited evidence. The
    adjudicated letter is left out on purpose: the brief informs the debate, it does not vote."""
    points: list[dict[str, object]] = []
    guard = decision.guard.get("outcome", "not_triggered")
    head = f"Cross-source adjudication: route {decision.route} (confidence {decision.confidence})."
    if guard != "not_triggered":
        head += f" Override guard: {guard}."
    points.append({"point": f"{head} {decision.rationale}".strip(),
                   "sources": list(range(1, len(decision.bundle.local) + len(decision.bundle.dynamic) + 1))[:6]})
    for i, ev in enumerate(decision.bundle.local[:per_source], 1):
        points.append({"point": f"Local passage: {ev.title}: {ev.text[:200]}", "sources": [i]})
    for j, ev in enumerate(decision.bundle.dynamic[:per_source], 1):
        tier = f"[{ev.quality} quality] " if ev.quality else ""
        points.append({"point": f"Web document {tier}{ev.title}: {ev.text[:200]}", "sources": [n_local + j]})
    return points
