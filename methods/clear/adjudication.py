"""Adjudication (paper section 2.3.2-2.3.3, appendix A.2): override guard, challenge audit, follow-up.

The loop: verify the bundle; then

1. **Override guard** - the route is `accept_dynamic` and the dynamic answer d conflicts with the
   other pathways: with a parametric=local consensus (the default is that consensus, reverted
   route `keep_local`), or with a three-way split (the default is the parametric answer, reverted
   route `keep_parametric`). Where one of p, l has no valid answer, the one that has is the
   default (its route on reversion). The guard runs a targeted follow-up search only if the bundle
   holds at least one high-tier dynamic document (n_high >= 1); otherwise the override is
   rejected with no further retrieval. It grants the override only if the follow-up judgement
   says all of: supports_challenger, default_not_better_supported, query_aligned,
   exact_option_support, and not unresolved_conflict. Any failure (or follow-up disabled, the
   budget spent, an invalid judgement) reverts to the default.
2. **Challenge audit** - the route is not `accept_dynamic` but p == lc != d: a follow-up search
   runs; the decision reopens (route `accept_dynamic`, answer d) only if the follow-up documents
   have n_high >= 1 or n_medium >= 2 and the judgement clearly supports the challenger (the same
   five conditions). The judge is asked only when the threshold is met. Otherwise the consensus
   stands (route `consensus` where the verifier had said `needs_more_search`).
3. **needs_more_search** (no guard or audit case) - a follow-up search targeted at the competing
   answers; its documents are merged into the bundle and the verifier runs again.

A follow-up search has two steps: a query writer sees only the conflict (and, for MCQ, the
competing options) and writes one query, whose results only gather evidence; then the judge (for
the guard and the audit) or the next verification (needs_more_search) decides from them. All
follow-ups of a question share the bound `max_follow_ups`; `follow_up: false` disables them.
Free-text questions have no letter equality, so the guard and the audit do not apply there (as in
the authors' free-text adapter); needs_more_search follow-ups do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medpanel.agents import events
from medpanel.agents.types import TranscriptEvent
from medpanel.methods.clear.bundle import Answer, Bundle, Candidate, FollowUp, label
from medpanel.methods.clear.pathways import Context, assess, dynamic, dynamic_documents, local
from medpanel.methods.clear.roles import followup
from medpanel.methods.clear.roles.judge import Judgement, failing
from medpanel.methods.clear.roles.judge import judge as ask_judge
from medpanel.methods.clear.settings import PATHWAYS
from medpanel.methods.clear.verdict import Verdict, verify


def guard_case(bundle: Bundle) -> tuple[Answer, str, str] | None:
    """(default answer, conflict kind, reverted route) when d conflicts with the other pathways."""
    p, lc, d = (bundle.answer(x) for x in PATHWAYS)
    others = [a for a in (p, lc) if a is not None]
    if d is None or not others or d in others:
        return None
    if p is not None and p == lc:
        return p, "parametric_local_consensus", "keep_local"
    if p is not None:
        return p, "three_way_split" if lc is not None else "parametric_vs_dynamic", "keep_parametric"
    assert lc is not None
    return lc, "local_vs_dynamic", "keep_local"


def settle(fu: FollowUp, after: Answer | None) -> None:
    """Record the answer that stood once this follow-up's evidence was weighed; a change to a
    valid answer is an accepted revision (a change to no answer is not)."""
    fu.answer_after = after
    fu.revised = after is not None and after != fu.answer_before


def audit_case(bundle: Bundle) -> bool:
    p, lc, d = (bundle.answer(x) for x in PATHWAYS)
    return p is not None and p == lc and d is not None and d != p


@dataclass
class Decision:
    """d = (a*, z*, j*, gamma*, B*) and the path that led to it."""

    answer: Answer | None
    route: str
    rationale: str
    confidence: str
    verdicts: list[Verdict]
    guard: dict[str, Any]
    audit: dict[str, Any]
    bundle: Bundle

    @property
    def routes_history(self) -> list[str]:
        return [v.route for v in self.verdicts]

    @property
    def fallback_used(self) -> bool:
        return any(v.fallback for v in self.verdicts)

    @property
    def follow_ups(self) -> int:
        return len(self.bundle.followups)

    @property
    def revisions(self) -> int:
        return sum(f.revised for f in self.bundle.followups)


@dataclass
class Adjudicator:
    ctx: Context
    bundle: Bundle
    verdicts: list[Verdict] = field(default_factory=list)
    guard_record: dict[str, Any] = field(default_factory=lambda: {"outcome": "not_triggered"})
    audit_record: dict[str, Any] = field(default_factory=lambda: {"outcome": "not_triggered"})

    def blocked(self) -> str | None:
        """Why no follow-up search may run now, or None."""
        if not self.ctx.follow_up:
            return "follow-up search disabled"
        if len(self.bundle.followups) >= self.ctx.settings.max_follow_ups:
            return f"follow-up bound reached (max_follow_ups={self.ctx.settings.max_follow_ups})"
        return None

    def note(self, role: str, step: str, content: str, data: dict[str, Any], round: int,
             act: events.Act | None = None) -> None:
        self.ctx.session.record(TranscriptEvent(kind="note", role=role, agent=role, step=step, round=round,
                                                content=content, data=data, act=act))

    async def run(self) -> Decision:
        # Each answer change is credited to exactly one follow-up: the last one before it. A
        # needs_more_search follow-up is settled by the answer that stands after the next
        # verification - the guard's or the audit's default when one of them runs next (they hold
        # the default until they grant), which then credit any change to their own follow-up.
        pending: FollowUp | None = None
        rnd = 0
        while True:
            rnd += 1
            verdict = await verify(self.ctx, self.bundle, rnd)
            self.verdicts.append(verdict)
            if verdict.fallback:
                self.note("verifier", "heuristic_fallback", f"fallback: {verdict.fallback_reason}",
                          verdict.record(), rnd)
            case = guard_case(self.bundle) if not self.bundle.freetext and verdict.answer is not None else None
            guarded = verdict.route == "accept_dynamic" and case is not None
            audited = (not guarded and not self.bundle.freetext and verdict.answer is not None
                       and verdict.route != "accept_dynamic" and audit_case(self.bundle))
            if pending is not None:
                standing = case[0] if guarded and case else self.bundle.answer("parametric") if audited \
                    else verdict.answer
                settle(pending, standing)
                pending = None
            if verdict.answer is None:
                break  # nothing valid to adjudicate (fallback rule 7)
            if guarded and case is not None:
                verdict = await self.guard(verdict, case, rnd)
                break
            if audited:
                verdict = await self.audit(verdict, rnd)
                break
            if verdict.route != "needs_more_search":
                break
            why = self.blocked()
            if why is not None:
                self.note("followup", "unresolved", f"needs_more_search, no follow-up: {why}", {"reason": why}, rnd)
                break
            competing = [self.bundle.answer(p) for p in PATHWAYS]
            pending = await self.follow_up("needs_more_search", verdict.answer, None, competing, rnd)
        final = verdict
        return Decision(answer=final.answer, route=final.route, rationale=final.rationale,
                        confidence=final.confidence, verdicts=self.verdicts, guard=self.guard_record,
                        audit=self.audit_record, bundle=self.bundle)

    # -- override guard ------------------------------------------------------------------------

    async def guard(self, verdict: Verdict, case: tuple[Answer, str, str], rnd: int) -> Verdict:
        default, kind, revert_route = case
        challenger = self.bundle.answer("dynamic")
        n_high = self.bundle.counts["n_high"]
        rec: dict[str, Any] = {"conflict": kind, "default": list(default), "challenger": list(challenger or ()),
                               "n_high": n_high}
        granted = False
        if n_high < 1:
            rec["outcome"] = "rejected_no_high"
        elif (why := self.blocked()) is not None:
            rec["outcome"], rec["reason"] = "rejected_no_followup", why
        else:
            fu = await self.follow_up("guard", default, challenger, [], rnd)
            rec["followup"] = {"query": fu.query, **fu.counts}
            granted = await self.judged(fu, rnd, rec, invalid="rejected_judge_invalid",
                                        unsupported="rejected_conditions", accepted="granted")
        self.guard_record = rec
        self.note("guard", "override_guard", f"override guard: {rec['outcome']}", rec, rnd,
                  act=events.Ruling(rule="guard", outcome=rec["outcome"]))
        if granted:
            return Verdict(answer=challenger, route="accept_dynamic", confidence="high", round=rnd,
                           rationale=f"{verdict.rationale} [override guard: granted after follow-up]",
                           verifier_answer=verdict.verifier_answer)
        return Verdict(answer=default, route=revert_route, round=rnd,
                       confidence="high" if kind == "parametric_local_consensus" else "medium",
                       rationale=f"{verdict.rationale} [override guard: {rec['outcome']}; default kept]",
                       verifier_answer=verdict.verifier_answer)

    async def judged(self, fu: FollowUp, rnd: int, rec: dict[str, Any], *, invalid: str, unsupported: str,
                     accepted: str) -> bool:
        """The judge's ruling on follow-up evidence, written into `rec` under the caller's outcome
        names. Each rule (guard, audit) keeps its own thresholds before it asks."""
        judgement = await self.judge(fu, rnd)
        if judgement is None:
            rec["outcome"] = invalid
            settle(fu, fu.default)
            return False
        if failed := failing(judgement):
            rec["outcome"], rec["failed"] = unsupported, failed
            settle(fu, fu.default)
            return False
        rec["outcome"] = accepted
        settle(fu, fu.challenger)
        return True

    # -- challenge audit -----------------------------------------------------------------------

    async def audit(self, verdict: Verdict, rnd: int) -> Verdict:
        default = self.bundle.answer("parametric")
        challenger = self.bundle.answer("dynamic")
        assert default is not None and challenger is not None
        rec: dict[str, Any] = {"verifier_route": verdict.route, "default": list(default),
                               "challenger": list(challenger)}
        reopened = False
        if (why := self.blocked()) is not None:
            rec["outcome"], rec["reason"] = "kept_no_followup", why
        else:
            fu = await self.follow_up("audit", default, challenger, [], rnd)
            c = fu.counts
            rec["followup"] = {"query": fu.query, **c}
            if not (c["n_high"] >= 1 or c["n_medium"] >= 2):
                rec["outcome"] = "kept_below_threshold"
                settle(fu, default)
            else:
                reopened = await self.judged(fu, rnd, rec, invalid="kept_judge_invalid",
                                             unsupported="kept_not_supported", accepted="reopened")
        self.audit_record = rec
        self.note("audit", "challenge_audit", f"challenge audit: {rec['outcome']}", rec, rnd,
                  act=events.Ruling(rule="audit", outcome=rec["outcome"]))
        if reopened:
            return Verdict(answer=challenger, route="accept_dynamic", confidence="high", round=rnd,
                           rationale=f"{verdict.rationale} [challenge audit: reopened by follow-up evidence]",
                           verifier_answer=verdict.verifier_answer)
        route = verdict.route if verdict.route in ("consensus", "keep_parametric", "keep_local") else "consensus"
        return Verdict(answer=default, route=route, confidence=verdict.confidence, round=rnd,
                       rationale=f"{verdict.rationale} [challenge audit: {rec['outcome']}; consensus kept]",
                       verifier_answer=verdict.verifier_answer, fallback=verdict.fallback,
                       fallback_reason=verdict.fallback_reason)

    # -- targeted follow-up search ---------------------------------------------------------------

    def conflict_text(self, purpose: str, default: Answer | None, challenger: Answer | None,
                      competing: list[Answer | None]) -> str:
        b = self.bundle
        if purpose in ("guard", "audit"):
            return (f"Default answer (stands unless clearly wrong): {label(b, default)}\n"
                    f"Challenger answer (proposed from external search): {label(b, challenger)}")
        seen: list[Answer] = []
        lines = []
        for pathway, answer in zip(PATHWAYS, competing, strict=True):
            if answer is not None:
                lines.append(f"{pathway}: {label(b, answer)}")
                if answer not in seen:
                    seen.append(answer)
        return ("The evidence so far cannot decide between these answers:\n" + "\n".join(lines)
                + f"\nPreliminary answer: {label(b, default)}")

    async def follow_up(self, purpose: str, default: Answer | None, challenger: Answer | None,
                        competing: list[Answer | None], rnd: int) -> FollowUp:
        """Step 1: a query conditioned on the conflict; its results only gather evidence."""
        ctx, s = self.ctx, self.ctx.settings
        conflict = self.conflict_text(purpose, default, challenger, competing)
        query = await followup.write_query(ctx.session, self.bundle.question, conflict, round=rnd)
        fallback = not query
        if fallback:
            # An invalid query reply still gets a targeted search: the stem plus the disputed options.
            options = [self.bundle.question.options.get(a, "") for ans in (default, challenger) if ans for a in ans]
            query = " ".join([self.bundle.question.text[:250], *options])[:400]
        docs = await ctx.search("dynamic", query, s.follow_k, step="followup_search", round=rnd, purpose=purpose)
        docs, quality = await assess(ctx, docs, step="assess_followup_quality", round=rnd)
        fu = FollowUp(purpose=purpose, query=query, query_fallback=fallback, evidence=docs, default=default,
                      challenger=challenger, answer_before=default)
        self.bundle.followups.append(fu)
        added = self.bundle.merge(docs)
        self.note("followup", "followup_merge", f"{purpose} follow-up: {len(docs)} documents, {added} new",
                  {"purpose": purpose, "query": query, "query_fallback": fallback, "quality": quality,
                   "merged": added, "bundle_counts": self.bundle.counts}, rnd,
                  act=events.FollowUpSearch(purpose=purpose))
        return fu

    async def judge(self, fu: FollowUp, rnd: int) -> Judgement | None:
        """Step 2: the adjudication judges from the follow-up documents alone."""
        parsed = await ask_judge(self.ctx.session, self.bundle.question, default=label(self.bundle, fu.default),
                             challenger=label(self.bundle, fu.challenger), evidence=fu.evidence,
                             chars=self.ctx.settings.verifier_passage_chars, round=rnd)
        if parsed is None:
            fu.judgement = {"invalid": True}
            return None
        fu.judgement = {**parsed.model_dump(), "failed": failing(parsed)}
        return parsed


async def adjudicate(ctx: Context, first: Candidate) -> Decision:
    """CLEAR's one entry point: the local and dynamic pathways beside `first`, then the verifier,
    the override guard, the challenge audit and the follow-up searches.

    `first` is the parametric candidate: the backbone's own answer in the CLEAR pipeline, the
    panel's current position when CLEAR is the panel's evidence channel. The pathways run one after
    another: transcripts stay in a stable order and a small local server is not asked for three
    completions at once.
    """
    loc = await local(ctx)
    docs, record = await dynamic_documents(ctx)
    dyn = await dynamic(ctx, docs, record)
    bundle = Bundle(question=ctx.question, candidates={"parametric": first, "local": loc, "dynamic": dyn},
                    local=list(loc.evidence), dynamic=list(docs), quality_record=record)
    return await Adjudicator(ctx, bundle).run()
