"""Transcripts of format 2 and earlier, read as format 3: each event given the act it had no field for.

Before format 2 an event said what it was in the debate only through its pipeline's step names
and `data` keys; the analysis matched them. Format 2 gave the debate's events their acts, but not
CLEAR's: its pathway answers, verdicts, follow-ups and rulings were still told apart by their step
and role names until format 3. This module is the one place that still knows those names: it gives
an old event the act (`agents.events`) that the pipelines of that time would have set, so every
reader sees typed acts whatever the file's age. Nothing else in the event changes. The rules are
the ones the analysis applied to those names:

- a call whose step (before any `:`) is `turn`, `initial`, `reconsider` or `answer`, or `sample_<i>`,
  is an `AnswerAt` (stage `r<round>t<turn>` for a turn; a sample votes as `sample_<i>` at `answer`);
- the challenger's `critique` call (and its `critique:rewrite`) is a `Critique`;
- `brief`, `recruitment`, the router's `route` to a `critique_round` and `group_start` notes are a
  `Brief`, a `Recruitment`, a `FocusedRound` and a `GroupStart`, read from their `data`;
- a vote event is a `Vote` of its `data`;
- CLEAR's (format 2 too): a `candidate`'s call whose step is a pathway (`parametric`, `local`,
  `dynamic`) is a `PathwayAnswer`, the `verifier`'s `verify` call a `Verdict`; the `followup_merge`
  note a `FollowUpSearch` (its `purpose`), the `override_guard` and `challenge_audit` notes a
  `Ruling` of rule `guard` and `audit` (their `outcome`), and the `format_gate` note a `Ruling` of
  rule `format_gate` (outcome `valid`, or the `reason` it rejected; only a rejection intervened).
"""

from __future__ import annotations

from collections.abc import Mapping

from medpanel.agents.events import (
    Act,
    AnswerAt,
    Brief,
    Critique,
    FocusedRound,
    FollowUpSearch,
    GroupStart,
    PathwayAnswer,
    Recruitment,
    Ruling,
    Verdict,
    Vote,
)

ANSWER_STEPS = ("turn", "initial", "reconsider", "answer")
"""Call steps whose reply was an agent's answer (`sample_<i>` too: self-consistency)."""
PATHWAY_STEPS = ("parametric", "local", "dynamic")
"""A CLEAR `candidate`'s call steps: the pathway it answered for."""
RULING_STEPS = {"override_guard": "guard", "challenge_audit": "audit"}
"""CLEAR's notes of a rule's ruling -> the rule."""


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


def _clear_call_act(e: Mapping[str, object], base: str) -> Act | None:
    role = e.get("role")
    if role == "candidate" and base in PATHWAY_STEPS:
        return PathwayAnswer(pathway=base)
    if role == "verifier" and base == "verify":
        return Verdict()
    return None


def _clear_note_act(base: str, data: Mapping[str, object]) -> Act | None:
    if base == "followup_merge":
        return FollowUpSearch(purpose=str(data.get("purpose", "")))
    if base in RULING_STEPS:
        return Ruling(rule=RULING_STEPS[base], outcome=str(data.get("outcome", "")))
    if base == "format_gate":
        valid = bool(data.get("valid", True))
        return Ruling(rule="format_gate", outcome="valid" if valid else str(data.get("reason", "")),
                      intervened=not valid)
    return None


def _parts(e: Mapping[str, object]) -> tuple[object, str, Mapping[str, object]]:
    data = e.get("data")
    return e.get("kind"), str(e.get("step") or ""), data if isinstance(data, Mapping) else {}


def act_v1(e: Mapping[str, object]) -> Act | None:
    """The act of an event of format 1 or earlier (as decoded JSON), by the rules above."""
    kind, step, data = _parts(e)
    base = step.partition(":")[0]
    if kind == "call":
        return _call_act(e, base) or _clear_call_act(e, base)
    if kind == "note":
        return _note_act(e, step, data) or _clear_note_act(base, data)
    if kind == "vote":
        return Vote.of(data)
    return None


def act_v2(e: Mapping[str, object]) -> Act | None:
    """The act of an event of format 2 that has none (as decoded JSON): CLEAR's, by the rules above."""
    kind, step, data = _parts(e)
    base = step.partition(":")[0]
    if kind == "call":
        return _clear_call_act(e, base)
    if kind == "note":
        return _clear_note_act(base, data)
    return None


def old_act(e: Mapping[str, object], version: int) -> Act | None:
    """The act of an event of a file of format `version` (below 3) that has none."""
    return act_v1(e) if version < 2 else act_v2(e)


def upgrade_events(events: object, version: int) -> object:
    """The `events` of a transcript of format `version` (below 3) with each event that has no act
    given its own (new dicts; the input is left as it is). Anything that is not a list of objects
    is returned for the record to refuse."""
    if not isinstance(events, list):
        return events
    out = []
    for e in events:
        act = old_act(e, version) if isinstance(e, dict) and e.get("act") is None else None
        out.append(e if act is None else {**e, "act": act})
    return out
