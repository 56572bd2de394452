"""Candidate records and the evidence bundle the verifier reasons over (paper eq. 5 and 7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medpanel.agents.types import Question
from medpanel.methods.clear.quality import counts, tier
from medpanel.methods.clear.settings import PATHWAYS, Pathway
from medpanel.retrieval.evidence import Evidence

Answer = tuple[str, ...]
"""MCQ letters (sorted); for free text a 1-tuple holding the conclusion."""


@dataclass
class Candidate:
    """c_i = (a_i, E_i, P_i): one pathway's answer, its evidence and its provenance."""

    pathway: Pathway
    answer: Answer | None
    """None when the pathway gave no valid answer (it then takes no part in agreement)."""
    reasoning: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)

    def record(self, chars: int = 300) -> dict[str, Any]:
        return {"pathway": self.pathway, "answer": list(self.answer) if self.answer else None,
                "reasoning": self.reasoning[:800], "provenance": self.provenance,
                "evidence": [evidence_record(ev, chars) for ev in self.evidence]}


def evidence_record(ev: Evidence, chars: int = 300) -> dict[str, Any]:
    """A compact copy for the decision object (full passages are in the retrieval notes)."""
    return {"doc_id": ev.doc_id, "title": ev.title, "source": ev.source, "url": ev.url, "year": ev.year,
            "retriever": ev.retriever, "rank": ev.rank, "quality": ev.quality, "flags": list(ev.flags),
            "text": ev.text[:chars]}


def evidence_key(ev: Evidence) -> str:
    return ev.url or f"{ev.source}:{ev.doc_id}"


@dataclass
class FollowUp:
    """One targeted follow-up search: the conflict it targeted, what it found, how it was judged."""

    purpose: str
    """guard, audit or needs_more_search."""
    query: str
    query_fallback: bool
    evidence: list[Evidence]
    default: Answer | None = None
    challenger: Answer | None = None
    judgement: dict[str, Any] | None = None
    answer_before: Answer | None = None
    """The answer standing when the follow-up was triggered (the guard's or audit's default, or the
    preliminary answer of a needs_more_search verdict)."""
    answer_after: Answer | None = None
    """The answer standing once its evidence was weighed (see `adjudication.settle`)."""
    revised: bool = False
    """answer_after is valid and differs from answer_before: an accepted revision. Each change of
    the answer is credited to one follow-up only, so a question's revisions count its changes."""

    @property
    def counts(self) -> dict[str, int]:
        return counts(self.evidence)

    def record(self, chars: int = 300) -> dict[str, Any]:
        return {"purpose": self.purpose, "query": self.query, "query_fallback": self.query_fallback,
                "default": list(self.default) if self.default else None,
                "challenger": list(self.challenger) if self.challenger else None,
                **self.counts, "judgement": self.judgement, "revised": self.revised,
                "answer_before": list(self.answer_before) if self.answer_before else None,
                "answer_after": list(self.answer_after) if self.answer_after else None,
                "evidence": [evidence_record(ev, chars) for ev in self.evidence]}


@dataclass
class Bundle:
    """B: the query, the three candidates, local and dynamic evidence with provenance and quality."""

    question: Question
    candidates: dict[str, Candidate]
    local: list[Evidence] = field(default_factory=list)
    dynamic: list[Evidence] = field(default_factory=list)
    """The dynamic pathway's documents, then those merged in by follow-up searches (no duplicates)."""
    followups: list[FollowUp] = field(default_factory=list)
    quality_record: dict[str, Any] = field(default_factory=dict)

    @property
    def freetext(self) -> bool:
        return not self.question.options

    def answer(self, pathway: str) -> Answer | None:
        c = self.candidates.get(pathway)
        return c.answer if c is not None else None

    @property
    def counts(self) -> dict[str, int]:
        return counts(self.dynamic)

    def merge(self, evidence: list[Evidence]) -> int:
        """B' = Merge(B, E_follow): append the new documents; returns how many were new."""
        seen = {evidence_key(ev) for ev in self.dynamic}
        added = 0
        for ev in evidence:
            if evidence_key(ev) not in seen:
                seen.add(evidence_key(ev))
                self.dynamic.append(ev)
                added += 1
        return added

    def majority(self) -> Answer | None:
        """The answer at least two pathways share (MCQ), if any."""
        answers = [self.answer(p) for p in PATHWAYS]
        for a in answers:
            if a is not None and sum(1 for b in answers if b == a) >= 2:
                return a
        return None

    def record(self, chars: int = 300) -> dict[str, Any]:
        return {"candidates": {p: c.record(chars) for p, c in self.candidates.items()},
                "local": [evidence_record(ev, chars) for ev in self.local],
                "dynamic": [evidence_record(ev, chars) for ev in self.dynamic],
                "quality": {**self.counts, **self.quality_record},
                "followups": [f.record(chars) for f in self.followups],
                "tiers": [tier(ev) for ev in self.dynamic]}


def label(bundle: Bundle, answer: Answer | None) -> str:
    """An answer as the prompts show it: letters with their option text, or the free-text conclusion."""
    if answer is None:
        return "no valid answer"
    q = bundle.question
    if not q.options:
        return answer[0][:600]
    return " + ".join(f"({a}) {q.options.get(a, '?')}" for a in answer)

