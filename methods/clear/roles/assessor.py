"""CLEAR's source-quality assessor: one backbone call labels every dynamic document (CLEAR A.2).

The paper: the retrieved dynamic documents "are assessed in a single backbone call and assigned a
categorical quality level of high, medium, or low according to source authority, recency, and
content type". So by default (`llm_quality: true`) one call sees every document, each with its
prior from the deterministic domain table (`medpanel.retrieval.quality.QUALITY_TABLE`, the
authors' table), and returns one level per document; that level is the document's tier.

- The reply's schema has one required field per document (`P1` ... `Pn`, each high|medium|low),
  so a valid reply labels every document exactly once.
- An invalid reply (after the one re-ask) leaves every document at its prior, and the record says
  so: the table is the fallback, never a guess.
- A title that says the work was retracted stays low whatever the label (recorded as a change).
- `clear-dual` asks the second model (`settings.assessor_model`); `llm_quality: false` uses the
  table alone (no call).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, create_model

from medpanel.agents.evidence import passages_block, quote_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.methods.clear.quality import tier
from medpanel.retrieval.evidence import Evidence, QualityTier

PROMPTS = Prompts(__name__)

Level = Literal["high", "medium", "low"]


def priors_block(evidence: list[Evidence]) -> str:
    """Each document's publisher, year and prior level from the domain table, as quoted data."""
    lines = []
    for i, ev in enumerate(evidence, 1):
        host = (urlsplit(ev.url).hostname or ev.url) if ev.url else "no url"
        year = f", {ev.year}" if ev.year else ""
        lines.append(f"P{i}: prior {tier(ev)} (publisher {host}{year})")
    return quote_block("source_priors", "\n".join(lines))


class QualityLabels(BaseModel):
    """The assessor's reply: one level per document, fields `P1` ... `Pn`, read in order as `levels`."""

    @property
    def levels(self) -> list[QualityTier]:
        return [value for _, value in self]


@functools.lru_cache(maxsize=64)
def labels_model(n: int) -> type[QualityLabels]:
    """One required high|medium|low field per document, P1..Pn (one class per document count)."""
    fields: dict[str, Any] = {f"P{i}": (Level, Field(description=f"Quality level of document P{i}."))
                              for i in range(1, n + 1)}
    return create_model(f"QualityLabels{n}", __base__=QualityLabels, **fields)


@dataclass
class Assessment:
    evidence: list[Evidence]
    record: dict[str, Any] = field(default_factory=dict)


async def llm_assess(session: QuestionSession, question_text: str, evidence: list[Evidence], *, chars: int | None,
                     step: str = "assess_quality", round: int = 0) -> Assessment:
    """AssessQuality: one call labels all documents, each shown with its domain-table prior."""
    if not evidence:
        return Assessment(evidence, {"llm": "skipped (no documents)"})
    agent = RoleAgent(session, name="assessor", role="assessor", system_message=PROMPTS.render("system"))
    prompt = PROMPTS.render("request", question=question_text[:1500], passages=passages_block(evidence, chars),
                    priors=priors_block(evidence), n=len(evidence))
    reply = await agent.speak(prompt, labels_model(len(evidence)), step=step, round=round)
    if reply is None:
        return Assessment(evidence, {"llm": "invalid; domain-table priors kept", "model": session.spec.model_name})
    out, changes = [], []
    for ev, new in zip(evidence, reply.levels, strict=True):
        prior = tier(ev)
        why = "llm label"
        if "retracted" in ev.flags and new != "low":
            new, why = "low", "retracted: stays low"
        if new != prior:
            changes.append({"doc_id": ev.doc_id, "from": prior, "to": new, "why": why})
        out.append(ev.model_copy(update={"quality": new}))
    return Assessment(out, {"llm": "applied", "model": session.spec.model_name, "labels": reply.model_dump(),
                            "changes": changes})
