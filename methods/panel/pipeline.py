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
from typing import Any, Literal

from pydantic import model_validator

from medpanel.agents.events import Vote
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model
from medpanel.agents.pipelines.base import Outcome, Pipeline
from medpanel.agents.plan import ConditionPlan, PlanError
from medpanel.agents.tables import TableSpec
from medpanel.agents.types import Condition, Flags, Question, TranscriptEvent, flag_on
from medpanel.methods.panel.channels.clear import ClearChannel, prepare_channel
from medpanel.methods.panel.channels.knowledge import KnowledgeChannel, Timing, prepare
from medpanel.methods.panel.channels.tables import knowledge_table
from medpanel.methods.panel.roles.challenger import Critique
from medpanel.methods.panel.settings import PanelSettings
from medpanel.methods.panel.state import Group, PanelState
from medpanel.methods.panel.steps import (
    add_member,
    between_brief,
    coordinate,
    critique,
    recruit,
    run_turn,
    select_team,
    upfront_brief,
)
from medpanel.methods.panel.summary import PanelSummary
from medpanel.methods.panel.tables import PANEL_TABLES, self_assessment_table
from medpanel.methods.panel.vote import moderate

Coordination = Literal["naive", "independent", "routed"]


class PanelPlan(ConditionPlan):
    """A panel condition decoded once, at plan time: the run reads these fields and nothing else
    (docs/methods/panel.md: "The plan of a condition")."""

    challenger: bool
    recruit: bool
    knowledge: bool
    """The `k` flag: knowledge recruitment between turns (routed coordination retrieves without it)."""
    coordination: Coordination = "naive"
    evidence: Literal["none", "corpus", "clear"]
    """The evidence channel the question opens: none, a curator's brief over one corpus, or CLEAR's
    adjudication (`settings.k_source: clear` or the `-clear` variant)."""
    timing: Timing
    """When the channel retrieves: `none` without a channel, `upfront` once before the first turn,
    `between_blind` / `between_gap` after each turn but the last."""
    blind: bool
    """Between turns, the Knowledge Gate does not see the critique: `between_blind`, or no Challenger."""

    @model_validator(mode="after")
    def _routes_on_a_critique(self) -> PanelPlan:
        # `decode` refuses such a condition by name; this keeps a stored plan from running one.
        if self.coordination == "routed" and not self.challenger:
            raise ValueError("routed coordination needs the Challenger (c1)")
        return self

    @property
    def uses_channel(self) -> bool:
        return self.evidence != "none"

    @property
    def between(self) -> bool:
        """The channel is consulted after each turn but the last (the routed controller may skip a turn)."""
        return self.timing in ("between_blind", "between_gap")


def decode(slug: str, flags: Flags, settings: PanelSettings) -> PanelPlan:
    """The plan of a panel condition: its flags and variant read against the settings, once."""
    variant = flags.get("variant")
    coordination: Coordination = "routed" if variant == "routed" else "independent" if variant == "ind" else "naive"
    challenger, knowledge = flag_on(flags, "c"), flag_on(flags, "k")
    if coordination == "routed" and not challenger:
        # Refused here, with the plan, not when the first question runs: the controller routes on the
        # Challenger's gap type, which c0 never produces.
        raise PlanError(f"condition {slug!r}: routed coordination routes on the Challenger's diagnosis, which "
                        f"c0 switches off. Use {slug.replace('c0', 'c1', 1)} (or drop the variant)",
                        field="variants")
    channel = knowledge or coordination == "routed"
    clear = settings.k_source == "clear" or variant == "clear"
    # `timing: none` beside a channel: the panel retrieves between turns, its default, as it always did
    timing: Timing = ("none" if not channel else "between_gap" if settings.timing == "none" else settings.timing)
    between = timing in ("between_blind", "between_gap")
    return PanelPlan(slug=slug, flags=flags, variant=str(variant) if variant else None, challenger=challenger,
                     recruit=flag_on(flags, "r"), knowledge=knowledge, coordination=coordination,
                     evidence="none" if not channel else "clear" if clear else "corpus", timing=timing,
                     blind=between and (timing == "between_blind" or not challenger))


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
        return decode(condition.slug, condition.flags, settings)

    def read_plan(self, stored: dict[str, Any], settings: PanelSettings) -> PanelPlan:
        if "evidence" in stored:
            return PanelPlan.model_validate(stored)
        # Stored before `k` was decoded at plan time: that version decoded these same flags against
        # these same settings as each question ran, which is what `decode` does now.
        return decode(str(stored["slug"]), dict(stored.get("flags") or {}), settings)

    def prepare(self, plans: Sequence[PanelPlan], settings: PanelSettings) -> None:
        if any(p.uses_channel for p in plans):
            prepare(settings)
        if any(p.evidence == "clear" for p in plans):
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
        state = PanelState(question=question, session=session, settings=s, group=group,
                           independent=plan.coordination != "naive", assessors=plan.coordination == "independent",
                           routed=plan.coordination == "routed")
        channel = _open_channel(plan, session, question, s)
        for spec in await select_team(state):
            add_member(state, spec, turn=1, recruited=False)
        if channel is not None and plan.timing == "upfront":
            await upfront_brief(state, channel)
        answer_type = answer_model(question.letters, multi=question.multi_answer)
        total = s.rounds * s.turns_per_round
        stopped_early = False
        for index in range(1, total + 1):
            rnd, turn = (index - 1) // s.turns_per_round + 1, (index - 1) % s.turns_per_round + 1
            await run_turn(state, answer_type, rnd=rnd, turn=turn, index=index)
            if index == total:
                break  # an intervention after the last turn could not change any answer
            found = await _intervene(state, plan, channel, rnd=rnd, turn=turn, index=index)
            if s.early_stop and _agreed(state) and not (found and found.material_weakness):
                stopped_early = True
                session.record(TranscriptEvent(kind="note", role="pipeline", agent="moderator", step="early_stop",
                                               round=rnd, turn=turn, content="All agents agree; discussion ends."))
                break
        answer, vote = await moderate(state)
        session.record(TranscriptEvent(kind="vote", role="moderator", agent="moderator", step="final",
                                       content=",".join(answer) or "invalid", data=vote, act=Vote.of(vote)))
        return Outcome(answer=answer, invalid=not answer,
                       summary=_summary(state, channel, stopped_early=stopped_early, tie="tied" in vote))


def _open_channel(plan: PanelPlan, session: QuestionSession, question: Question,
                  s: PanelSettings) -> KnowledgeChannel | None:
    """The question's evidence channel, the one the plan chose: CLEAR's, the curator's, or none."""
    if plan.evidence == "clear":
        return ClearChannel(session, question, s)
    if plan.evidence == "corpus":
        return KnowledgeChannel(session, question, s)
    return None


async def _intervene(state: PanelState, plan: PanelPlan, channel: KnowledgeChannel | None, *, rnd: int, turn: int,
                     index: int) -> Critique | None:
    """The interventions after a turn, in the paper's order: the critique, the routed controller's
    choice, the brief, the recruitment decision. Returns the critique (None without the Challenger)."""
    found = await critique(state, rnd=rnd, turn=turn, index=index) if plan.challenger else None
    route = coordinate(state, found, rnd=rnd, turn=turn) if plan.coordination == "routed" else None
    if channel is not None and plan.between and route in (None, "retrieve"):
        await between_brief(state, channel, found, blind=plan.blind, rnd=rnd, turn=turn, index=index)
    if (plan.recruit and (index == 1 or not state.settings.self_assessment)) or route == "recruit":
        await recruit(state, found, rnd=rnd, turn=turn, index=index)
    return found


def _agreed(state: PanelState) -> bool:
    """Every discussant holds the same valid answer."""
    panel = state.discussants()
    return len({m.last for m in panel}) == 1 and all(m.last for m in panel)


def _summary(state: PanelState, channel: KnowledgeChannel | None, *, stopped_early: bool, tie: bool) -> PanelSummary:
    recruits = [m for m in state.members if m.recruited]
    summary = PanelSummary(
        recruited=len(recruits), recruited_roles=[m.spec.role for m in recruits],
        initial_panel=[m.spec.role for m in state.members if not m.recruited],
        recruit_names=[m.agent.name for m in recruits], final_panel_size=len(state.members),
        critiques_with_weakness=state.weaknesses, stopped_early=stopped_early, tie=tie)
    if channel is not None:
        summary.add(channel.facts())
    # The optional facts are set only where they hold, so a record never carries them as nulls.
    if state.settings.self_assessment:
        summary.self_assessment = True
    if channel is not None:
        summary.independent = state.independent
    if state.assessors:
        assessed = [m.assessment for m in state.members if m.assessment]
        summary.auxiliary_assessments = sum(1 for a in assessed if a["valid"])
        summary.auxiliary_invalid = sum(1 for a in assessed if not a["valid"])
    if state.routed:
        summary.routes = state.routes
    return summary
