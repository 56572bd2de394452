"""Transcripts of format 1 and earlier, read as format 2: each event given the act it had no field for.

Before format 2 an event said what it was in the debate only through its pipeline's step names
and `data` keys; the analysis matched them. This module is the one place that still knows those
names: it gives an old event the act (`agents.events`) that the pipelines of that time would
have set, so every reader sees typed acts whatever the file's age. Nothing else in the event
changes. The rules are the ones the analysis applied to those names:

- a call whose step (before any `:`) is `turn`, `initial`, `reconsider` or `answer`, or `sample_<i>`,
  is an `AnswerAt` (stage `r<round>t<turn>` for a turn; a sample votes as `sample_<i>` at `answer`);
- the challenger's `critique` call (and its `critique:rewrite`) is a `Critique`;
- `brief`, `recruitment`, the router's `route` to a `critique_round` and `group_start` notes are a
  `Brief`, a `Recruitment`, a `FocusedRound` and a `GroupStart`, read from their `data`;
- a vote event is a `Vote` of its `data`.
"""

from __future__ import annotations

from collections.abc import Mapping

from medpanel.agents.events import Act, AnswerAt, Brief, Critique, FocusedRound, GroupStart, Recruitment, Vote

ANSWER_STEPS = ("turn", "initial", "reconsider", "answer")
"""Call steps whose reply was an agent's answer (`sample_<i>` too: self-consistency)."""


def _names(value: object) -> tuple[str, ...]:
    return tuple(str(n) for n in value) if isinstance(value, list | tuple) else ()


def _call_act(e: Mapping[str, object], base: str) -> Act | None:
    if base == "turn":
        return AnswerAt.turn(_int(e.get("round")), _int(e.get("turn")))
    if base in ANSWER_STEPS:
        return AnswerAt(stage=base)
    if base.startswith("sample_"):
        return AnswerAt(stage="answer", voter=base)
    if base == "critique" and e.get("role") == "challenger":
        return Critique()
    return None


def _note_act(e: Mapping[str, object], step: str, data: Mapping[str, object]) -> Act | None:
    if step == "brief":
        if data.get("source") == "clear":
            guard = data.get("guard") or {}
            return Brief(received_by=_names(data.get("received_by")), trigger=str(data.get("trigger", "")),
                         source="clear", route=None if data.get("route") is None else str(data.get("route")),
                         guard=str(guard.get("outcome", "not_triggered")) if isinstance(guard, Mapping)
                         else "not_triggered")
        return Brief(received_by=_names(data.get("received_by")), trigger=str(data.get("trigger", "")))
    if step == "recruitment":
        return Recruitment(recruited=_names(data.get("recruited")), trigger=str(data.get("trigger", "")))
    if step == "route" and e.get("agent") == "router" and data.get("route") == "critique_round":
        return FocusedRound(gap_type=str(data.get("gap_type") or ""))
    if step == "group_start":
        return GroupStart(group=str(e.get("agent", "")).replace("group_", "g"))
    return None


def _int(value: object) -> int:
    return value if isinstance(value, int) else int(str(value or 0))


def act_v1(e: Mapping[str, object]) -> Act | None:
    """The act of an event of format 1 or earlier (as decoded JSON), by the rules above."""
    kind, step = e.get("kind"), str(e.get("step") or "")
    data = e.get("data")
    data = data if isinstance(data, Mapping) else {}
    if kind == "call":
        return _call_act(e, step.partition(":")[0])
    if kind == "note":
        return _note_act(e, step, data)
    if kind == "vote":
        return Vote.of(data)
    return None


def upgrade_events(events: object) -> object:
    """A format-1 transcript's `events` with each event's act filled in (new dicts; the input is
    left as it is). Anything that is not a list of objects is returned for the record to refuse."""
    if not isinstance(events, list):
        return events
    out = []
    for e in events:
        act = act_v1(e) if isinstance(e, dict) and "act" not in e else None
        out.append(e if act is None else {**e, "act": act})
    return out
