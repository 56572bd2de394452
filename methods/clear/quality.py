"""Source-quality tiers of dynamic evidence: the domain table's prior for each document, and counts.

The labelling call that assesses every document in one backbone call (CLEAR A.2, `llm_quality:
true`) is the assessor role, `medpanel.methods.clear.roles.assessor`; the table here is its starting prior
and its fallback, never a guess.
"""

from __future__ import annotations

from medpanel.agents.evidence import quote_block
from medpanel.retrieval.evidence import Evidence, QualityTier
from medpanel.retrieval.quality import assess_source

TIERS: tuple[QualityTier, ...] = ("low", "medium", "high")


def deterministic(evidence: list[Evidence]) -> list[Evidence]:
    """Every document gets its tier from the domain/authority table (its URL, title and text)."""
    out = []
    for ev in evidence:
        tier, flags = assess_source(ev.url, ev.title, ev.text)
        merged = list(dict.fromkeys([*ev.flags, *flags]))
        out.append(ev.model_copy(update={"quality": tier, "flags": merged}))
    return out


def tier(ev: Evidence) -> QualityTier:
    return ev.quality or assess_source(ev.url, ev.title, ev.text)[0]


def counts(evidence: list[Evidence]) -> dict[str, int]:
    """n_high, n_medium, n_low of a document list."""
    tiers = [tier(ev) for ev in evidence]
    return {"n_high": tiers.count("high"), "n_medium": tiers.count("medium"), "n_low": tiers.count("low")}


def quality_block(evidence: list[Evidence]) -> str:
    """The tier list as a line per passage; titles and hosts are document data, so it is quoted."""
    if not evidence:
        return quote_block("source_quality", "(no documents)")
    c = counts(evidence)
    lines = [f"P{i}: {tier(ev)} ({ev.url or 'no url'})" for i, ev in enumerate(evidence, 1)]
    head = f"n_high={c['n_high']} n_medium={c['n_medium']} n_low={c['n_low']}"
    return quote_block("source_quality", head + "\n" + "\n".join(lines))
