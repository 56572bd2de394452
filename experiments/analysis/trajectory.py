"""Answer trajectories: every agent's letters and the majority after every stage of one
debate, and the interventions that came in between.

The input is a transcript document as `experiments.store.Store.commit` writes it (a dict with
`condition`, `question`, `answer`, `gold`, `correct`, `invalid`, `error`, `events`, ...), so the
analysis runs on any finished run directory, older ones included. Nothing here calls a model or
reads a file.

**Stages.** A trajectory is a list of stages; the last one is always `final`, the recorded answer.

A transcript whose answers are marked with `AnswerAt` acts (a debate) has one stage per
`AnswerAt.stage`, in the order they first occur (a panel's turns `r1t1`, `r1t2` ...; a generalist's
`initial` and `reconsider`; a baseline's `answer`, every self-consistency sample an agent of it, a tie
of samples settled by the vote's own tie rule with no intervention). Any other transcript is read by
the method that claims it (`MethodReport.stages`: CLEAR's pathways and verdicts,
`methods/clear/trajectory.py`), or has no stage before `final`.

A multi-group panel (a `GroupStart` act before each group) runs its groups one after another; stage k then holds
turn k of every group, agents named `g<group>:<agent>`, as the final vote pools all members.

**Positions.** After each stage every agent has a position: the letters of its last valid answer
(sorted, joined by commas for multi-answer items), as the panel's moderator counts them
(`Member.last`). An agent whose reply in a stage has no valid answer, even after the re-ask,
*keeps* its previous position (cell status `invalid`); one that did not speak in a stage (a group
that stopped early) keeps it too (`silent`). An agent with no valid answer yet has no position and
no vote. An agent recruited mid-debate enters at its first turn (`Stage.joined`); before that it
is absent, never counted as invalid. `-ind` assessors take no turns: they appear as the `recruit`
intervention, and their effect on the answer as the final stage's `moderator` intervention.

**Majority.** The unique most common position among the agents that have one; `tie` when two or
more positions share the top count; `none` when no agent has a position. A tie or `none` is never
scored right. The final stage's position is the recorded answer (`none` when invalid or errored).

**Interventions** between stage k and k+1 (`Stage.before` of stage k+1):

| kind            | fires when                                                                        |
|-----------------|-----------------------------------------------------------------------------------|
| `critique`      | the Challenger's (screened) critique has a material weakness; detail: gap type    |
| `brief`         | a curator's evidence brief reached at least one agent; `to`: who received it      |
| `clear_verdict` | a CLEAR adjudication reached the panel as its brief (route, guard), or CLEAR's     |
|                 | verifier gave a verdict (route)                                                   |
| `recruit`       | at least one specialist joined (`to`: the roles); `-ind`: assessed                |
| `focused_round` | routed coordination sent the next turn a challenge to answer point by point       |
| `follow_up`     | CLEAR ran a targeted follow-up search (detail: guard, audit or needs_more_search) |
| `guard`         | CLEAR's override guard ruled (detail: its outcome)                                |
| `audit`         | CLEAR's challenge audit ruled (detail: its outcome)                               |
| `format_gate`   | CLEAR's format gate rejected the decision's letters                               |
| `moderator`     | the final answer was decided by a rule other than the plain majority: a tie-break |
|                 | call, support over all turns, information blocks, the `-ind` moderator, ...       |

A brief that reached nobody (no passages, an invalid brief) changed no prompt and is not an
intervention; the Knowledge Gate's decision alone is not one either. An upfront brief comes before
the first stage (`Stage.before` of stage 1) and so precedes no transition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from medpanel.agents.events import ADJUDICATION, AnswerAt, Brief, Critique, FocusedRound, GroupStart, Recruitment, Vote
from medpanel.experiments.analysis.event_facts import EventFacts, events_of, version_of
from medpanel.experiments.analysis.method_plugins import stage_readers
from medpanel.experiments.analysis.trajectory_types import (
    FINAL,
    INTERVENTIONS,
    NO_POSITION,
    PATHWAYS,
    TIE,
    Cell,
    CellStatus,
    Direction,
    Flip,
    Intervention,
    Kind,
    Outcome,
    Stage,
    State,
    Trajectory,
    columns,
    direction,
    final_state,
    majority_of,
    outcome_of,
    position_of,
    state_of,
    transition_of,
)

# The types and flat views live in trajectory_types; they are re-exported so one import serves.
__all__ = [
    "FINAL", "INTERVENTIONS", "NO_POSITION", "PATHWAYS", "TIE", "Cell", "CellStatus",
    "Direction", "Flip", "Intervention", "Kind", "Outcome", "Stage", "State", "Trajectory", "columns", "direction",
    "final_state", "majority_of", "outcome_of", "position_of", "state_of", "trajectory", "trajectory_of",
    "transition_of",
]

# -- extraction --------------------------------------------------------------------------------


def _answer_at(e: EventFacts) -> AnswerAt | None:
    return e.act if e.kind == "call" and isinstance(e.act, AnswerAt) else None


def _agent_key(e: EventFacts, at: AnswerAt, group: str) -> str:
    name = at.voter or e.agent
    return f"{group}:{name}" if group else name


def answer_of(e: EventFacts) -> str | None:
    """The letters of a call's reply (its `answer`), as a position; None when it has none."""
    return position_of(e.parsed.get("answer")) if e.parsed is not None else None


@dataclass
class _Slot:
    """One stage of one group while the transcript is read."""

    label: str
    replies: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    after: list[Intervention] = field(default_factory=list)
    first_event: int | None = None


def _intervention(e: EventFacts, i: int) -> Intervention | None:
    act = e.act
    if e.kind != "note" or act is None:
        return None
    if isinstance(act, Brief):
        if not act.received_by:
            return None
        if act.source == ADJUDICATION:
            detail = f"route {act.route}" + (f", guard {act.guard}" if act.guard != "not_triggered" else "")
            return Intervention("clear_verdict", detail, i, act.received_by)
        return Intervention("brief", act.trigger, i, act.received_by)
    if isinstance(act, Recruitment):
        return Intervention("recruit", act.trigger, i, act.recruited) if act.recruited else None
    if isinstance(act, FocusedRound):
        return Intervention("focused_round", act.gap_type, i)
    return None


def _critique(e: EventFacts) -> bool:
    return e.kind == "call" and isinstance(e.act, Critique)


def final_event(events: Sequence[EventFacts]) -> int | None:
    """The index of the transcript's last vote or decision."""
    for i in range(len(events) - 1, -1, -1):
        if events[i].kind in ("vote", "decision"):
            return i
    return None


def _decision_interventions(events: Sequence[EventFacts], idx: int | None) -> list[Intervention]:
    """The final vote's `moderator` intervention, when something other than the last turn's plain
    majority decided: the `-ind` moderator weighing assessments, a tie's resolution (tie-break call,
    support over all turns, groups' decisions), or information blocks that outvoted the raw count."""
    if idx is None:
        return []
    e = events[idx]
    vote = e.act
    if e.kind != "vote" or not isinstance(vote, Vote) or not vote.rule:
        return []
    rule, decided_by = vote.rule, vote.decided_by
    if decided_by:  # -ind; "agreement": the panel's leader and every assessment agreed, nothing was weighed
        return [] if decided_by == "agreement" else [Intervention("moderator", f"auxiliary: {decided_by}", idx)]
    if vote.tied:
        return [Intervention("moderator", "tie-break call" if rule == "moderator" else rule, idx)]
    counts = vote.counts
    if "blocks" in rule and counts:
        top = max(counts.values())
        leaders = [k for k, v in counts.items() if v == top]
        if len(leaders) != 1 or leaders[0] != e.content:
            return [Intervention("moderator", rule, idx)]
    return []


def by_event(items: list[Intervention]) -> list[Intervention]:
    """Interventions in the order of their events (one without an event first)."""
    return sorted(items, key=lambda x: -1 if x.event_index is None else x.event_index)


def _build(slots: list[list[_Slot]], gold: Sequence[str], scoring: str, scored: bool,
           before_first: list[Intervention]) -> tuple[list[Stage], list[Intervention]]:
    """Groups' slots merged by ordinal (stage k = turn k of every group), positions carried; and
    the interventions after the last stage (they come before the final answer)."""
    n = max((len(g) for g in slots), default=0)
    held: dict[str, str | None] = {}
    stages: list[Stage] = []
    pending = list(before_first)
    for k in range(n):
        cells: dict[str, Cell] = {}
        joined: list[str] = []
        label = ""
        first_event: int | None = None
        after: list[Intervention] = []
        spoke: set[str] = set()
        for group in slots:
            if k >= len(group):
                continue
            slot = group[k]
            label = label or slot.label
            if slot.first_event is not None and (first_event is None or slot.first_event < first_event):
                first_event = slot.first_event
            for name, (answer, _i) in slot.replies.items():
                if name not in held:
                    held[name] = None
                    if stages:
                        joined.append(name)
                if answer is not None:
                    held[name] = answer
                    cells[name] = Cell(answer, "answered")
                else:
                    cells[name] = Cell(held[name], "invalid")
                spoke.add(name)
            after += slot.after
        for name, pos in held.items():
            if name not in spoke:
                cells[name] = Cell(pos, "silent")
        majority = majority_of([c.position for c in cells.values()])
        stages.append(Stage(label=label, cells=cells, majority=majority,
                            state=state_of(majority, gold, scoring, scored), before=by_event(pending),
                            event_index=first_event, joined=tuple(joined)))
        pending = after
    return stages, by_event(pending)


def _debate(events: Sequence[EventFacts], gold: Sequence[str], scoring: str,
            scored: bool) -> tuple[list[Stage], list[Intervention]]:
    groups: list[list[_Slot]] = [[]]
    group = ""
    before_first: list[Intervention] = []
    critique: dict[int, tuple[int, bool, str]] = {}
    """Per (group ordinal) the latest parsed critique of the current slot: (event, weakness, gap)."""

    def flush_critique() -> None:
        g = len(groups) - 1
        if g in critique:
            i, weak, gap = critique.pop(g)
            if weak:
                target = groups[g][-1].after if groups[g] else before_first
                target.append(Intervention("critique", gap, i, group=group))

    for i, e in enumerate(events):
        if e.kind == "note" and isinstance(e.act, GroupStart):
            flush_critique()
            group = e.act.group
            if groups[-1]:
                groups.append([])
            continue
        at = _answer_at(e)
        if at is not None:
            slots = groups[-1]
            if not slots or slots[-1].label != at.stage:
                flush_critique()
                slots.append(_Slot(label=at.stage, first_event=i))
            name = _agent_key(e, at, group)
            answer = answer_of(e)
            # A re-ask follows an unparsed reply in the same stage: its valid answer stands.
            if answer is not None or name not in slots[-1].replies:
                slots[-1].replies[name] = (answer, i)
            continue
        if _critique(e):
            if e.parsed is not None:
                critique[len(groups) - 1] = (i, bool(e.parsed.get("material_weakness")),
                                             str(e.parsed.get("gap_type") or ""))
            continue
        found = _intervention(e, i)
        if found is not None:
            if group:
                # Names inside a group are the group's own: prefixed like the agents' cells.
                to = found.to if found.kind == "recruit" else tuple(f"{group}:{n}" for n in found.to)
                found = dataclasses.replace(found, group=group, to=to)
            slots = groups[-1]
            (slots[-1].after if slots else before_first).append(found)
    flush_critique()
    return _build([g for g in groups if g], gold, scoring, scored, before_first)


def trajectory_of(o: Outcome, events: Sequence[EventFacts], *, scoring: str = "exact_set") -> Trajectory:
    """The trajectory of one transcript's outcome and typed events (module docstring: every rule)."""
    gold, scored = o.gold, o.scored
    stages: list[Stage] = []
    final_before: list[Intervention] = []
    kind: Kind = "empty"
    if any(_answer_at(e) is not None for e in events):
        kind = "debate"
        stages, final_before = _debate(events, gold, scoring, scored)
    else:
        for method in stage_readers():  # a transcript a method reads by its own rules (CLEAR's pathways and verdicts)
            read = method.stages(events, gold, scoring, scored)
            if read is not None:
                kind, stages, final_before = read
                break
    idx = final_event(events)
    final_before += _decision_interventions(events, idx)
    answer = position_of(list(o.answer)) if not o.error else None
    majority = answer or NO_POSITION
    stages.append(Stage(FINAL, {}, majority, final_state(o), before=final_before,
                        event_index=idx if not o.error else None))
    return Trajectory(condition=o.condition, dataset=o.dataset, qid=o.qid, repeat=o.repeat, gold=gold, kind=kind,
                      stages=stages, scored=scored, error=o.error)


def trajectory(doc: Mapping[str, Any], *, scoring: str = "exact_set") -> Trajectory:
    """The trajectory of one transcript document (see the module docstring for every rule)."""
    return trajectory_of(outcome_of(doc), events_of(doc.get("events"), version_of(doc)), scoring=scoring)
