"""What CLEAR records about one question (a result row's `summary`), for its report tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from medpanel.agents.summary import Summary
from medpanel.methods.clear.bundle import Bundle
from medpanel.methods.clear.quality import counts
from medpanel.methods.clear.settings import PATHWAYS
from medpanel.retrieval.evidence import Evidence

if TYPE_CHECKING:  # the adjudication (its agents, the model client) is a run's: CLEAR's report tables read this module
    from medpanel.methods.clear.adjudication import Decision


class ClearSummary(Summary):
    """The condition's mode; for CLEAR conditions the adjudication (route, guard, audit, follow-ups,
    each pathway's answer and how they agreed); for free text the response and its rubric grade."""

    mode: str | None = None
    """direct, rag, online or clear."""
    variant: str | None = None
    web_source: str | None = None
    """The dynamic pathway's web source (`snapshot`, the offline web; `tavily`, live search) where the
    condition searches the web: the paper's Table 9 names its live backend."""
    pathway: str | None = None
    """A baseline's one pathway."""
    route: str | None = None
    routes_history: list[str] | None = None
    confidence: str | None = None
    guard: str | None = None
    audit: str | None = None
    follow_ups: int | None = None
    revisions: int | None = None
    accepted_revision: bool | None = None
    fallback_used: bool | None = None
    candidates: dict[str, list[str] | None] | None = None
    agreement: str | None = None
    n_high: int | None = None
    n_medium: int | None = None
    n_low: int | None = None
    rubric: bool | None = None
    """Free text: whether the task file holds this question's rubric."""
    response_chars: int | None = None
    rubric_score: float | None = None
    """Free text: the example's score. HealthBench (`grade_kind: rubric`): points met / positive
    points, unclipped; MedRBench (`grade_kind: medrbench`): 1 correct, 0 wrong."""
    grade_valid: bool | None = None
    grade_kind: str | None = None
    judge_support: str | None = None
    """MedRBench treatment: what the judge's supporting information was, `web:<source>` (results of
    the run's live web backend) or `published_analysis` (no live backend: the case's own analysis)."""
    tag_scores: dict[str, float] | None = None
    """HealthBench: the example's score per example tag and per rubric tag (theme:..., axis:...)."""

    @property
    def adjudicated(self) -> bool:
        """A CLEAR condition's row (a baseline's has no route)."""
        return self.route is not None


def tier_facts(evidence: list[Evidence]) -> ClearSummary:
    """How many documents of each quality tier (the dynamic pathway's)."""
    c = counts(evidence)
    return ClearSummary(n_high=c["n_high"], n_medium=c["n_medium"], n_low=c["n_low"])


def clear_facts(d: Decision) -> ClearSummary:
    """The adjudication's facts (its report tables read them)."""
    answers = {p: list(c.answer) if c.answer else None for p, c in d.bundle.candidates.items()}
    facts = ClearSummary(
        route=d.route,
        routes_history=d.routes_history,
        confidence=d.confidence,
        guard=d.guard.get("outcome", "not_triggered"),
        audit=d.audit.get("outcome", "not_triggered"),
        follow_ups=d.follow_ups,
        revisions=d.revisions,
        accepted_revision=d.revisions > 0,
        fallback_used=d.fallback_used,
        candidates=answers,
        agreement=agreement(d.bundle),
    )
    if "dynamic" in d.bundle.candidates:
        facts.add(tier_facts(d.bundle.candidates["dynamic"].evidence))
    return facts


def agreement(bundle: Bundle) -> str:
    """all_agree, param_local_vs_dynamic, ..., three_way_split, or partial (a pathway gave no answer)."""
    p, lc, d = (bundle.answer(x) for x in PATHWAYS)
    if bundle.freetext:
        return "free_text"
    if p is None or lc is None or d is None:
        return "partial"
    if p == lc == d:
        return "all_agree"
    if p == lc:
        return "param_local_vs_dynamic"
    if lc == d:
        return "local_dynamic_vs_param"
    if p == d:
        return "param_dynamic_vs_local"
    return "three_way_split"
