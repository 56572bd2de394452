"""Source-quality tiers of dynamic evidence: the deterministic domain rule first, an LLM second.

The deterministic tier comes from `medpanel.retrieval.quality.QUALITY_TABLE` (the README prints
it). The optional LLM assessment (setting `llm_quality`, and always in `clear-dual`, where a
second model makes it) sorts the documents by content type, recency and relevance; its answer
moves a tier by a fixed rule, so the final tier stays auditable:

| LLM says the passage is ...                         | tier change                |
|-----------------------------------------------------|----------------------------|
| not about this question (`irrelevant`)              | low, whatever the domain   |
| a guideline, systematic review or reference text    | up one (low->medium->high) |
| commercial, promotional or opinion                  | down one                   |
| outdated (superseded recommendation, old data)      | down one                   |

An invalid assessment leaves the deterministic tiers in place and is recorded as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from medpanel.agents.client import QuestionSession
from medpanel.agents.knowledge import passages_block, quote_block
from medpanel.agents.roles import RoleAgent, render
from medpanel.retrieval.evidence import Evidence, QualityTier
from medpanel.retrieval.quality import assess_source

TIERS: tuple[QualityTier, ...] = ("low", "medium", "high")


class QualityReview(BaseModel):
    """The assessor's sorting of the numbered passages (a passage may be in several lists)."""

    authoritative: list[int] = Field(default_factory=list,
                                     description="Numbers of passages that are guidelines, systematic reviews "
                                                 "or authoritative reference texts.")
    outdated: list[int] = Field(default_factory=list, description="Numbers of passages likely outdated.")
    commercial: list[int] = Field(default_factory=list,
                                  description="Numbers of passages that are commercial, promotional or opinion.")
    irrelevant: list[int] = Field(default_factory=list,
                                  description="Numbers of passages not about this question.")


def deterministic(evidence: list[Evidence]) -> list[Evidence]:
    """Every document gets a tier from its URL (the domain/authority table); no model involved."""
    out = []
    for ev in evidence:
        tier, flags = assess_source(ev.url, ev.title)
        merged = list(dict.fromkeys([*ev.flags, *flags]))
        out.append(ev.model_copy(update={"quality": tier, "flags": merged}))
    return out


def tier(ev: Evidence) -> QualityTier:
    return ev.quality or assess_source(ev.url, ev.title)[0]


def counts(evidence: list[Evidence]) -> dict[str, int]:
    """n_high, n_medium, n_low of a document list."""
    tiers = [tier(ev) for ev in evidence]
    return {"n_high": tiers.count("high"), "n_medium": tiers.count("medium"), "n_low": tiers.count("low")}


def _shift(t: QualityTier, step: int) -> QualityTier:
    return TIERS[max(0, min(2, TIERS.index(t) + step))]


def combine(ev: Evidence, n: int, review: QualityReview) -> tuple[QualityTier, list[str]]:
    """The final tier of passage number `n` (1-based) under the table in the module docstring."""
    t = tier(ev)
    why: list[str] = []
    if n in review.irrelevant:
        return "low", ["llm:irrelevant"]
    if n in review.authoritative:
        t, why = _shift(t, 1), [*why, "llm:authoritative"]
    if n in review.commercial:
        t, why = _shift(t, -1), [*why, "llm:commercial"]
    if n in review.outdated:
        t, why = _shift(t, -1), [*why, "llm:outdated"]
    return t, why


def quality_block(evidence: list[Evidence]) -> str:
    """The tier list as a line per passage; titles and hosts are document data, so it is quoted."""
    if not evidence:
        return quote_block("source_quality", "(no documents)")
    c = counts(evidence)
    lines = [f"P{i}: {tier(ev)} ({ev.url or 'no url'})" for i, ev in enumerate(evidence, 1)]
    head = f"n_high={c['n_high']} n_medium={c['n_medium']} n_low={c['n_low']}"
    return quote_block("source_quality", head + "\n" + "\n".join(lines))


@dataclass
class Assessment:
    evidence: list[Evidence]
    record: dict[str, Any] = field(default_factory=dict)


async def llm_assess(session: QuestionSession, question_text: str, evidence: list[Evidence], *, chars: int | None,
                     step: str = "assess_quality", round: int = 0) -> Assessment:
    """One call rates all documents (as in the paper); the tiers then move by `combine`."""
    if not evidence:
        return Assessment(evidence, {"llm": "skipped (no documents)"})
    agent = RoleAgent(session, name="assessor", role="assessor", system_message=render("clear_assessor"))
    prompt = render("clear_assess_request", question=question_text[:1500], passages=passages_block(evidence, chars),
                    n=len(evidence))
    review = await agent.speak(prompt, QualityReview, step=step, round=round)
    if not isinstance(review, QualityReview):
        return Assessment(evidence, {"llm": "invalid; deterministic tiers kept", "model": session.spec.model_name})
    out, changes = [], []
    for i, ev in enumerate(evidence, 1):
        new, why = combine(ev, i, review)
        if new != tier(ev) or why:
            changes.append({"doc_id": ev.doc_id, "from": tier(ev), "to": new, "why": why})
        out.append(ev.model_copy(update={"quality": new, "flags": list(dict.fromkeys([*ev.flags, *why]))}))
    return Assessment(out, {"llm": "applied", "model": session.spec.model_name, "changes": changes,
                            "review": review.model_dump()})
