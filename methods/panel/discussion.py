"""One panel's discussion of one question (`PanelPipeline.discuss`): the team, the turns, the
interventions between them, the vote and the summary. Apart from the pipeline class, which a report
reads for its settings and tables, so only a run imports the agents, the channels and the client."""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.agents.events import Vote
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model
from medpanel.agents.pipelines.base import Outcome
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.methods.panel.channels.clear import ClearChannel, prepare_channel
from medpanel.methods.panel.channels.knowledge import KnowledgeChannel
from medpanel.methods.panel.channels.knowledge import prepare as prepare_source
from medpanel.methods.panel.plan import PanelPlan
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
from medpanel.methods.panel.vote import moderate


def prepare(plans: Sequence[PanelPlan], settings: PanelSettings) -> None:
    """Before any worker starts: open the corpus of a condition that uses a channel, and CLEAR's two
    sources when one adjudicates (`PanelPipeline.prepare`)."""
    if any(p.uses_channel for p in plans):
        prepare_source(settings)
    if any(p.evidence == "clear" for p in plans):
        prepare_channel(settings)


async def discuss(question: Question, plan: PanelPlan, session: QuestionSession, settings: PanelSettings, *,
                  group: Group | None = None) -> Outcome:
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
