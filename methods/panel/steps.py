"""One panel's steps: seating the team, a discussion turn, and the interventions between turns.

Each intervention is one function: `critique` (the Challenger, `c`), `upfront_brief` and
`between_brief` (the knowledge channel, `k`), `recruit` (`r`, with `-ind`'s `assess`) and
`coordinate` (the routed controller). The pipeline calls them in the paper's order; each reads
the panel's state and posts to it, and none decides whether it runs (the plan does).
"""

from __future__ import annotations

from typing import Any

from medpanel.agents import events as ev
from medpanel.agents.model.agent import agent_name
from medpanel.agents.model.structured import letters_of
from medpanel.agents.prompting import format_question
from medpanel.agents.types import TranscriptEvent
from medpanel.methods.panel.channels.clear import ClearChannel
from medpanel.methods.panel.channels.knowledge import KnowledgeChannel
from medpanel.methods.panel.roles import auxiliary, recruiter, selector, specialist
from medpanel.methods.panel.roles.challenger import Critique, PanelReview, challenge
from medpanel.methods.panel.roles.selector import Specialist
from medpanel.methods.panel.state import (
    FALLBACK_TEAM,
    Member,
    PanelState,
    Post,
    deliver,
    position_text,
    post_parts,
    render_posts,
    review,
    unique_roles,
    visible,
)
from medpanel.methods.panel.vote import panel_position

ROUTES = {
    "insufficient_evidence": "retrieve",
    "missing_expertise": "recruit",
    "logical_inconsistency": "critique_round",
    "unresolved_option_conflict": "critique_round",
    "missing_differential": "critique_round",
}
"""Routed coordination: the channel each gap type goes to (any other material weakness: a critique round)."""


def add_member(state: PanelState, spec: Specialist, *, turn: int, recruited: bool, assessor: bool = False) -> Member:
    name = agent_name(spec.role, state.taken())
    make = auxiliary.new_assessor if assessor else specialist.new_specialist
    agent = make(state.session, name=name, role=spec.role, expertise=spec.expertise,
                 group_note=state.group.note() if state.group is not None else None)
    member = Member(agent=agent, spec=spec, joined_turn=turn, recruited=recruited, auxiliary=assessor,
                    assessor=assessor)
    state.members.append(member)
    return member


async def select_team(state: PanelState) -> list[Specialist]:
    n = state.settings.initial_specialists
    group = state.group
    seated = list(group.seated) if group is not None else []
    choice = await selector.choose(state.session, state.question, n,
                                   group_note=group.note() if group is not None else None, seated=seated)
    team = unique_roles(choice.specialists, seated) if choice is not None else []
    if len(team) < n:
        fill = unique_roles(list(FALLBACK_TEAM), seated + [s.role for s in team])
        if len(team) + len(fill) < n:  # every fallback role is seated elsewhere: repeat one, recorded
            fill += unique_roles(list(FALLBACK_TEAM), [s.role for s in team + fill])
        team += fill
        state.session.record(TranscriptEvent(kind="note", role="pipeline", agent="selector", step="fallback_team",
                                             content="Selector gave fewer distinct specialists than needed; "
                                                     "filled from the fallback team.",
                                             data={"seated_elsewhere": seated}))
    return team[:n]


async def run_turn(state: PanelState, answer_type: Any, *, rnd: int, turn: int, index: int) -> None:
    """Every active member answers the same state; their posts are shared after the turn."""
    new_posts: list[Post] = []
    for member in state.discussants():
        unseen = visible(member, state.posts[member.seen :])
        if index == 1 and not member.recruited:
            text = format_question(state.question)
            if unseen:  # an upfront brief comes with the question
                text = f"{render_posts(unseen)}\n\n{text}"
        else:
            text = specialist.turn_request(render_posts(unseen), round=rnd, turn=turn)
        if state.focus and not member.auxiliary:
            text = specialist.focused(text, state.focus)
        deliver(member, state.posts[member.seen :])
        member.seen = len(state.posts)
        parsed = await member.agent.speak(text, answer_type, step="turn", round=rnd, turn=turn,
                                          parts=post_parts(unseen), act=ev.AnswerAt.turn(rnd, turn))
        if parsed is not None:
            member.last = letters_of(parsed)
            member.last_text = position_text(member, parsed)
            post = Post(member.agent.name, f"({member.spec.role}) {member.last_text}", index)
        else:
            post = Post(member.agent.name, f"({member.spec.role}) [no valid answer this turn]", index)
        if not member.auxiliary:
            new_posts.append(post)
    state.posts.extend(new_posts)
    state.history.append({m.agent.name: m.last for m in state.discussants()})
    state.focus = None


async def recruit(state: PanelState, critique: Critique | None, *, rnd: int, turn: int, index: int) -> list[str]:
    s = state.settings
    room = min(s.max_recruit_per_turn, s.max_panel - len(state.members),
               s.max_recruit_total - sum(m.recruited for m in state.members))
    trigger = "challenger" if critique is not None and critique.material_weakness else "self"
    if room <= 0:
        # The panel is full (or the run's recruitment budget is spent): asking would change nothing.
        state.session.record(TranscriptEvent(
            kind="note", role="pipeline", agent="recruiter", step="recruitment", round=rnd, turn=turn,
            content="no recruitment: panel or recruitment limit reached",
            data={"trigger": trigger, "checks": [], "flagged": 0, "room": 0, "recruited": [],
                  "panel": state.roles()}, act=ev.Recruitment(trigger=trigger)))
        return []
    checks: list[dict[str, object]] = []
    context = (f"The Challenger raised: [{critique.gap_type}] {critique.challenge}\n"
               if critique is not None and critique.material_weakness else "")
    for member in state.discussants():
        check = await recruiter.check(member.agent, state.roles(), context, round=rnd, turn=turn)
        if check is not None:
            checks.append({"agent": member.agent.name, "needed": check.needed, "specialty": check.specialty,
                           "reason": check.reason})
    flagged = [c for c in checks if c["needed"]]
    added: list[str] = []
    if flagged and room > 0:
        needs = "\n".join(f"- {c['specialty'] or 'unspecified'}: {c['reason']}" for c in flagged)
        crit = f"The Challenger's critique: {critique.challenge}\n" if context and critique else ""
        proposal = await recruiter.propose(state.session, state.question, state.roles(), needs=needs, critique=crit,
                                           k=room, round=rnd, turn=turn)
        if proposal is not None:
            gap = "\n".join(([f"The Challenger's critique: [{critique.gap_type}] {critique.challenge}"]
                              if context and critique else [])
                             + [f"What the team said was missing:\n{needs}"])
            for spec in unique_roles(proposal.specialists, state.roles())[:room]:
                member = add_member(state, spec, turn=index, recruited=True, assessor=state.assessors)
                member.auxiliary = state.independent
                added.append(spec.role)
                if member.assessor:
                    await assess(state, member, gap, rnd=rnd, turn=turn, index=index)
                    continue
                shown = visible(member, state.posts)
                trajectory = f"{format_question(state.question)}\n\nThe discussion so far:\n{render_posts(shown)}"
                await member.agent.hear(trajectory, source="moderator", parts=post_parts(shown))
                deliver(member, state.posts)
                member.seen = len(state.posts)
    state.session.record(TranscriptEvent(
        kind="note", role="pipeline", agent="recruiter", step="recruitment", round=rnd, turn=turn,
        content=f"recruited: {', '.join(added)}" if added else "no recruitment",
        data={"trigger": trigger, "checks": checks, "flagged": len(flagged),
              "room": room, "recruited": added, "panel": state.roles()},
        act=ev.Recruitment(recruited=tuple(added), trigger=trigger)))
    return added


async def assess(state: PanelState, member: Member, gap: str, *, rnd: int, turn: int, index: int) -> None:
    """`-ind`: the recruit's one targeted assessment of the gap that summoned it, for the moderator.

    It sees the question and the gap (the critique, what the panel said was missing), not the
    discussion, so it stays independent of the evidence-informed shared history and its brief.
    """
    q = state.question
    parsed = await auxiliary.assess(member.agent, q, role=member.spec.role, gap=gap, round=rnd, turn=turn)
    member.assessment = {"agent": member.agent.name, "role": member.spec.role, "turn": index, "gap": gap,
                         "valid": parsed is not None, "answer": list(letters_of(parsed)) if parsed else None,
                         "reasoning": parsed.reasoning if parsed is not None else None}
    if parsed is not None:
        member.last = letters_of(parsed)
        member.last_text = position_text(member, parsed)


async def critique(state: PanelState, *, rnd: int, turn: int, index: int) -> Critique | None:
    """`c: 1`: the Challenger reviews the whole trace so far; a material weakness is posted to the
    shared history, so every agent sees it next turn, before any recruitment decision."""
    # The paper's C(q, O, h_t): the accumulated trace, the Challenger's own earlier critiques and
    # the briefs included, so it reviews the debate and does not repeat itself.
    view = review(state)
    found = await challenge(state.session, state.question, view.trace, round=rnd, turn=turn,
                            depth=state.settings.challenger_depth, panel=PanelReview(index, view.group_note),
                            parts=view.parts)
    if found is not None and found.material_weakness:
        state.weaknesses += 1
        state.posts.append(Post("challenger", f"[Challenge: {found.gap_type}] {found.challenge}", index,
                                kind="critique"))
    return found


def route_for(found: Critique | None) -> str:
    """The routed controller's decision for one turn."""
    if found is None or not found.material_weakness or found.gap_type == "none":
        return "none"
    return ROUTES.get(found.gap_type, "critique_round")


def coordinate(state: PanelState, found: Critique | None, *, rnd: int, turn: int) -> str:
    """Routed coordination: the critique's gap type picks this turn's one channel, recorded as a
    `route` note; a critique round makes the next turn answer the challenge point by point."""
    route = route_for(found)
    state.session.record(TranscriptEvent(
        kind="note", role="pipeline", agent="router", step="route", round=rnd, turn=turn,
        content=f"{found.gap_type if found else 'no critique'} -> {route}",
        data={"gap_type": found.gap_type if found else None, "route": route},
        act=ev.FocusedRound(gap_type=found.gap_type if found else "") if route == "critique_round" else None))
    state.routes.append(route)
    if route == "critique_round" and found is not None:
        state.focus = f"[{found.gap_type}] {found.challenge}"
    return route


async def upfront_brief(state: PanelState, channel: KnowledgeChannel) -> None:
    """`timing: upfront`: one retrieval before the first turn, its brief posted to the shared history."""
    group = state.group
    if group is not None and group.shared_upfront:
        brief = group.upfront  # retrieved once for every group of the question
        if brief is not None:
            channel.results.append(brief)
    else:
        brief = await channel.upfront()
    if brief is not None:
        state.posts.append(Post("evidence_curator", brief.text(), 0, kind="brief", brief=brief))


async def between_brief(state: PanelState, channel: KnowledgeChannel, found: Critique | None, *, blind: bool,
                        rnd: int, turn: int, index: int) -> None:
    """Knowledge recruitment between turns: the channel sees the turn's positions (and, unless
    `blind`, the critique); its brief is posted to the shared history, after the critique."""
    trace = render_posts([p for p in state.posts if p.turn == index and p.kind == "position"])
    if isinstance(channel, ClearChannel):
        channel.panel_answer = panel_position(state)
    brief = await channel.between(trace, found, blind=blind, round=rnd, turn=turn)
    if brief is not None:
        state.posts.append(Post("evidence_curator", brief.text(), index, kind="brief", brief=brief))
