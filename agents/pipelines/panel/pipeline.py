"""The multi-specialist MDT panel with a meta-level Challenger and specialist recruitment.

The paper's multi-specialist backbone (section 3, appendix A): two question-conditioned
specialists discuss for `rounds` x `turns_per_round` turns. A turn is one cycle in which every
active agent responds; within a turn agents answer the same state (the posts up to the end of the
previous turn), so speaking order cannot bias a turn. After each turn but the last:

1. `c: 1` - the Challenger reviews the turn's positions. A material weakness is appended to the
   shared history (so every agent sees it next turn) before any recruitment decision.
2. `r: 1` - every active agent is asked whether a perspective is missing: before any critique
   exists (`c0r1`, self-triggered) or after it (`c1r1`, Challenger-informed). If at least one says
   yes, a recruiter proposes non-duplicate roles; at most `max_recruit_per_turn` join per turn,
   `max_recruit_total` per question and the panel never exceeds `max_panel`. Recruits first hear
   the trajectory so far.

3. `k: 1` - knowledge recruitment between turns: the Knowledge Gate sees the turn's positions
   and (with `c: 1`) the critique, and may retrieve; the curator's brief is posted to the shared
   history, after the critique and before the recruitment decision. `timing: upfront` instead
   retrieves once before the first turn with the question as the query.

Channel coordination when both channels are on: `c1r1k1` (naive) - recruits hear the whole
trajectory, briefs included. `c1r1k1-ind` (independent, paper section 3.2 and A.2) - a recruit
never enters the evidence-informed discussion: it is consulted once, on joining, for a targeted
assessment of the gap that summoned it (the Challenger's critique and what the panel said was
missing; never a brief, never the panel's posts), and the moderator decides from the panel's votes
and these auxiliary assessments (`moderate_with_auxiliary`, docs/methods/panel.md: "Independent coordination").

Routed coordination (`c1-routed`, beyond the paper): the Challenger's gap type picks one channel
per turn, recorded as a `route` note: insufficient evidence -> the Knowledge Gate and retrieval;
missing expertise -> specialist recruitment; a logical inconsistency, an unresolved option conflict
or a missing differential -> a focused critique round (the next turn must answer the challenge
point by point); no material weakness -> nothing. Recruits never receive a brief (as in `-ind`),
and the moderator counts agents who saw the same briefs as one correlated block (see `moderate`).

The final answer is the majority of the active agents' last valid letters; a tie goes to the
moderator model, which may choose only among the tied letters (docs/methods/panel.md: "Vote and tie rule").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from medpanel.agents.channels.clear import ClearChannel, prepare_channel
from medpanel.agents.channels.knowledge import KnowledgeChannel, prepare
from medpanel.agents.channels.tables import knowledge_table
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model
from medpanel.agents.pipelines.base import Outcome, Pipeline
from medpanel.agents.pipelines.panel.settings import PanelSettings
from medpanel.agents.pipelines.panel.state import Group, PanelState, Post, post_parts, render_posts, render_trace
from medpanel.agents.pipelines.panel.steps import add_member, recruit, run_turn, select_team
from medpanel.agents.pipelines.panel.summary import PanelSummary
from medpanel.agents.pipelines.panel.tables import PANEL_TABLES, self_assessment_table
from medpanel.agents.pipelines.panel.vote import moderate, panel_position
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.roles.challenger import Critique, challenge, panel_request
from medpanel.agents.tables import TableSpec
from medpanel.agents.types import Condition, Question, TranscriptEvent

ROUTES = {
    "insufficient_evidence": "retrieve",
    "missing_expertise": "recruit",
    "logical_inconsistency": "critique_round",
    "unresolved_option_conflict": "critique_round",
    "missing_differential": "critique_round",
}


def route_for(critique: Critique | None) -> str:
    """The routed controller's decision for one turn."""
    if critique is None or not critique.material_weakness or critique.gap_type == "none":
        return "none"
    return ROUTES.get(critique.gap_type, "critique_round")


class PanelPlan(ConditionPlan):
    challenger: bool
    recruit: bool
    knowledge: bool
    """The `k` flag: knowledge recruitment between turns (routed coordination retrieves without it)."""
    coordination: Literal["naive", "independent", "routed"] = "naive"
    evidence: Literal["corpus", "clear"] = "corpus"
    """The knowledge channel: a curator's brief over one corpus, or CLEAR's adjudication."""

    @property
    def uses_channel(self) -> bool:
        return self.knowledge or self.coordination == "routed"


class PanelPipeline(Pipeline[PanelSettings, PanelPlan]):
    settings_model = PanelSettings
    plan_model = PanelPlan
    summary_model = PanelSummary
    flags = ("c", "r", "k")
    variants = ("ind", "routed", "clear")
    """`-ind` independent coordination, `c1-routed` routed coordination, `-clear` CLEAR as the
    evidence channel (the same as `settings.k_source: clear`, as a condition of its own)."""
    tables = (*PANEL_TABLES, TableSpec(knowledge_table), TableSpec(self_assessment_table))

    def plan(self, condition: Condition, settings: PanelSettings) -> PanelPlan:
        variant = condition.flags.get("variant")
        coordination: Literal["naive", "independent", "routed"] = (
            "routed" if variant == "routed" else "independent" if variant == "ind" else "naive")
        return PanelPlan(slug=condition.slug, flags=condition.flags, variant=str(variant) if variant else None,
                         challenger=condition.on("c"), recruit=condition.on("r"), knowledge=condition.on("k"),
                         coordination=coordination,
                         evidence="clear" if settings.k_source == "clear" or variant == "clear" else "corpus")

    def prepare(self, plans: Sequence[PanelPlan], settings: PanelSettings) -> None:
        if any(p.uses_channel for p in plans):
            prepare(settings)
        if any(p.knowledge and p.evidence == "clear" for p in plans):
            prepare_channel(settings)

    def uses_verifier(self, plans: Sequence[PanelPlan], settings: PanelSettings) -> bool:
        return any(p.evidence == "clear" for p in plans)

    async def __call__(self, question: Question, plan: PanelPlan, session: QuestionSession,
                       settings: PanelSettings) -> Outcome:
        return await self.discuss(question, plan, session, settings)

    async def discuss(self, question: Question, plan: PanelPlan, session: QuestionSession,
                      settings: PanelSettings, *, group: Group | None = None) -> Outcome:
        """One panel's discussion; `group` when it is one of several panels on the same question."""
        s = settings
        routed = plan.coordination == "routed"
        if routed and not plan.challenger:
            raise ValueError("routed coordination routes on the Challenger's diagnosis: use c1-routed")
        ind = plan.coordination == "independent"
        state = PanelState(question=question, session=session, settings=s, group=group,
                           independent=ind or routed, assessors=ind, routed=routed)
        channel = _open_channel(plan, session, question, s)
        routes: list[str] = []
        for spec in await select_team(state):
            add_member(state, spec, turn=1, recruited=False)
        if channel is not None and s.timing == "upfront":
            await _upfront_brief(state, channel, group)
        answer_type = answer_model(question.letters, multi=question.multi_answer)
        total = s.rounds * s.turns_per_round
        recruited: list[str] = []
        weaknesses = 0
        stopped_early = False
        for index in range(1, total + 1):
            rnd, turn = (index - 1) // s.turns_per_round + 1, (index - 1) % s.turns_per_round + 1
            await run_turn(state, answer_type, rnd=rnd, turn=turn, index=index)
            if index == total:
                break  # an intervention after the last turn could not change any answer
            critique = await _critique(state, rnd=rnd, turn=turn, index=index) if plan.challenger else None
            if critique is not None and critique.material_weakness:
                weaknesses += 1
            route = _record_route(session, critique, rnd=rnd, turn=turn) if routed else None
            if routed:
                routes.append(route or "none")
            if channel is not None and s.timing != "upfront" and (not routed or route == "retrieve"):
                await _between_brief(state, channel, critique, blind=s.timing == "between_blind" or not plan.challenger,
                                     rnd=rnd, turn=turn, index=index)
            if routed and route == "critique_round" and critique is not None:
                state.focus = f"[{critique.gap_type}] {critique.challenge}"
            if (plan.recruit and (index == 1 or not s.self_assessment)) or route == "recruit":
                recruited += await recruit(state, critique, rnd=rnd, turn=turn, index=index)
            if s.early_stop and _agreed(state) and not (critique and critique.material_weakness):
                stopped_early = True
                session.record(TranscriptEvent(kind="note", role="pipeline", agent="moderator", step="early_stop",
                                               round=rnd, turn=turn, content="All agents agree; discussion ends."))
                break
        answer, vote = await moderate(state)
        session.record(TranscriptEvent(kind="vote", role="moderator", agent="moderator", step="final",
                                       content=",".join(answer) or "invalid", data=vote))
        summary = _summary(state, channel, recruited=recruited, weaknesses=weaknesses, stopped_early=stopped_early,
                           tie="tied" in vote, routes=routes if routed else None)
        return Outcome(answer=answer, invalid=not answer, summary=summary)


def _open_channel(plan: PanelPlan, session: QuestionSession, question: Question,
                  s: PanelSettings) -> KnowledgeChannel | None:
    """The question's evidence channel, when the plan uses one: CLEAR's or the curator's."""
    if not plan.uses_channel:
        return None
    if plan.evidence == "clear":
        return ClearChannel(session, question, s)
    return KnowledgeChannel(session, question, s)


async def _upfront_brief(state: PanelState, channel: KnowledgeChannel, group: Group | None) -> None:
    """`timing: upfront`: one retrieval before the first turn, its brief posted to the shared history."""
    if group is not None and group.shared_upfront:
        brief = group.upfront  # retrieved once for every group of the question
        if brief is not None:
            channel.results.append(brief)
    else:
        brief = await channel.upfront()
    if brief is not None:
        state.posts.append(Post("evidence_curator", brief.text(), 0, kind="brief", brief=brief))


async def _critique(state: PanelState, *, rnd: int, turn: int, index: int) -> Critique | None:
    """The Challenger's review of the turn; a material weakness is posted to the shared history."""
    # The paper's C(q, O, h_t): the accumulated trace, the Challenger's own earlier
    # critiques and the briefs included, so it reviews the debate and does not repeat itself.
    question, s = state.question, state.settings
    trace = render_trace(state.posts)
    request = panel_request(question, trace, turn=index, group_note=state.group.note() if state.group else None)
    critique = await challenge(state.session, question, trace, round=rnd, turn=turn, depth=s.challenger_depth,
                               request=request, parts=post_parts(state.posts))
    if critique is not None and critique.material_weakness:
        state.posts.append(Post("challenger", f"[Challenge: {critique.gap_type}] {critique.challenge}",
                                index, kind="critique"))
    return critique


def _record_route(session: QuestionSession, critique: Critique | None, *, rnd: int, turn: int) -> str:
    """The routed controller's channel for this turn, recorded as a `route` note."""
    route = route_for(critique)
    session.record(TranscriptEvent(
        kind="note", role="pipeline", agent="router", step="route", round=rnd, turn=turn,
        content=f"{critique.gap_type if critique else 'no critique'} -> {route}",
        data={"gap_type": critique.gap_type if critique else None, "route": route}))
    return route


async def _between_brief(state: PanelState, channel: KnowledgeChannel, critique: Critique | None, *, blind: bool,
                         rnd: int, turn: int, index: int) -> None:
    """Knowledge recruitment between turns: the channel sees the turn's positions (and, unless blind,
    the critique); its brief is posted to the shared history."""
    trace = render_posts([p for p in state.posts if p.turn == index and p.kind == "position"])
    if isinstance(channel, ClearChannel):
        channel.panel_answer = panel_position(state)
    brief = await channel.between(trace, critique, blind=blind, round=rnd, turn=turn)
    if brief is not None:
        state.posts.append(Post("evidence_curator", brief.text(), index, kind="brief", brief=brief))


def _agreed(state: PanelState) -> bool:
    """Every discussant holds the same valid answer."""
    panel = state.discussants()
    return len({m.last for m in panel}) == 1 and all(m.last for m in panel)


def _summary(state: PanelState, channel: KnowledgeChannel | None, *, recruited: list[str], weaknesses: int,
             stopped_early: bool, tie: bool, routes: list[str] | None) -> PanelSummary:
    summary: dict[str, object] = {
        "recruited": len(recruited),
        "recruited_roles": recruited,
        "initial_panel": [m.spec.role for m in state.members if not m.recruited],
        "recruit_names": [m.agent.name for m in state.members if m.recruited],
        "final_panel_size": len(state.members),
        "critiques_with_weakness": weaknesses,
        "stopped_early": stopped_early,
        "tie": tie,
    }
    if state.settings.self_assessment:
        summary["self_assessment"] = True
    if channel is not None:
        summary.update(channel.summary())
        summary["independent"] = state.independent
    if state.assessors:
        summary["auxiliary_assessments"] = sum(1 for m in state.members if m.assessment and m.assessment["valid"])
        summary["auxiliary_invalid"] = sum(1 for m in state.members if m.assessment and not m.assessment["valid"])
    if routes is not None:
        summary["routes"] = routes
    return PanelSummary.model_validate(summary)
