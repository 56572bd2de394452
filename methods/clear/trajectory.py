"""CLEAR's trajectory: read from its acts (pathway answers, verdicts, follow-ups, rulings) and its
decision's bundle.

CLEAR marks no answer with an `AnswerAt` act: its candidates are pathways, not discussants, so each
is a `PathwayAnswer`, and its verifier's calls are `Verdict`s. A transcript is CLEAR's when a
pathway answered or a decision carries a bundle or a candidate. Its stages before the final:
`pathways` (parametric, local, dynamic candidates, or the one pathway a baseline ran), then `verdict
1`, `verdict 2` ... (the verdicts the decision recorded); between them the interventions `follow_up`
(a `FollowUpSearch`) and `clear_verdict` (the verdict's route), and after the last verdict the
`Ruling`s that intervened: `guard`, `audit` (the override guard's and challenge audit's outcomes)
and `format_gate` (the gate rejected the decision's letters). Any method that marks its calls and
notes with these acts gets these stages, whatever it names its steps and roles.
"""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.agents.events import FollowUpSearch, PathwayAnswer, Ruling, Verdict
from medpanel.experiments.analysis.event_facts import EventFacts
from medpanel.experiments.analysis.trajectory import answer_of, by_event, final_event
from medpanel.experiments.analysis.trajectory_types import (
    NO_POSITION,
    PATHWAYS,
    Cell,
    Intervention,
    Stage,
    majority_of,
    position_of,
    state_of,
)

KIND = "clear"


def _pathway(e: EventFacts) -> str | None:
    return e.act.pathway if e.kind == "call" and isinstance(e.act, PathwayAnswer) else None


def is_clear(events: Sequence[EventFacts]) -> bool:
    return any(_pathway(e) is not None for e in events) or any(
        e.kind == "decision" and ("bundle" in e.data or "candidate" in e.data) for e in events)


def _pathway_answers(events: Sequence[EventFacts], decision: EventFacts | None
                     ) -> tuple[dict[str, tuple[str | None, int | None]], int | None]:
    """Each pathway's candidate (from the decision's bundle when there is one, else from its call)
    and the first pathway call's index."""
    calls: dict[str, tuple[str | None, int]] = {}
    first: int | None = None
    for i, e in enumerate(events):
        pathway = _pathway(e)
        if pathway is not None:
            first = i if first is None else first
            answer = answer_of(e)
            if answer is not None or pathway not in calls:
                calls[pathway] = (answer, i)
    out: dict[str, tuple[str | None, int | None]] = {}
    if decision is not None:
        data = decision.data
        candidates = (data.get("bundle") or {}).get("candidates")
        if isinstance(candidates, dict):
            for p in PATHWAYS:
                if p in candidates:
                    out[p] = (position_of((candidates[p] or {}).get("answer")), calls.get(p, (None, None))[1])
            return out, first
        if isinstance(data.get("candidate"), dict):
            p = str(data.get("pathway", data["candidate"].get("pathway", "")))
            out[p] = (position_of(data["candidate"].get("answer")), calls.get(p, (None, None))[1])
            return out, first
    # CLEAR's pathways in their order, then any other method's in the order they answered.
    return {p: calls[p] for p in [*PATHWAYS, *(p for p in calls if p not in PATHWAYS)] if p in calls}, first


def clear_stages(events: Sequence[EventFacts], gold: Sequence[str], scoring: str,
           scored: bool) -> tuple[list[Stage], list[Intervention]]:
    idx = final_event(events)
    decision = events[idx] if idx is not None and events[idx].kind == "decision" else None
    answers, first = _pathway_answers(events, decision)
    if not answers:
        return [], []
    cells = {p: Cell(a, "answered" if a is not None else "invalid") for p, (a, _i) in answers.items()}
    majority = majority_of([c.position for c in cells.values()])
    stages = [Stage("pathways", cells, majority, state_of(majority, gold, scoring, scored), event_index=first)]
    verify_calls: dict[int, int] = {}
    merges: list[tuple[int, Intervention]] = []
    rulings: list[Intervention] = []
    for i, e in enumerate(events):
        act = e.act
        if e.kind == "call" and isinstance(act, Verdict):
            verify_calls.setdefault(e.round, i)
        elif e.kind == "note" and isinstance(act, FollowUpSearch):
            merges.append((e.round, Intervention("follow_up", act.purpose, i)))
        elif e.kind == "note" and isinstance(act, Ruling) and act.intervened:
            rulings.append(Intervention(act.rule, act.outcome, i))
    for verdict in (decision.data if decision is not None else {}).get("verdicts") or []:
        rnd = int(verdict.get("round", len(stages)))
        pos = position_of(verdict.get("answer"))
        before = [m for r, m in merges if r == rnd - 1]
        before.append(Intervention("clear_verdict", f"route {verdict.get('route')}", verify_calls.get(rnd)))
        cell = {"verifier": Cell(pos, "answered" if pos is not None else "invalid")}
        m = pos or NO_POSITION
        stages.append(Stage(f"verdict {rnd}", cell, m, state_of(m, gold, scoring, scored), before=before,
                            event_index=verify_calls.get(rnd)))
    # The guard's or audit's follow-up and ruling come after the last verdict, before the final.
    return stages, by_event([m for _r, m in merges if m.detail in ("guard", "audit")] + rulings)
