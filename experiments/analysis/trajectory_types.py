"""The data of an answer trajectory: cells, stages, interventions, flips, and the
flat views of one (`transition_of`, `columns`). How they are read from a transcript, and what each
term means, is in `trajectory.py`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from medpanel.agents.types import score

TIE = "tie"
NO_POSITION = "none"
FINAL = "final"

Kind = str
"""`debate` (answers marked with `AnswerAt` acts), `empty`, or the kind a method's own reader names
(`MethodReport.stages`: CLEAR's `clear`)."""
CellStatus = Literal["answered", "invalid", "silent"]
State = Literal["right", "wrong", "tie", "none", "invalid", "error", "unscored"]
Direction = Literal["to_right", "to_wrong", "to_other_wrong"]

INTERVENTIONS = ("critique", "brief", "clear_verdict", "recruit", "focused_round", "follow_up", "guard", "audit",
                 "format_gate", "moderator")
PATHWAYS = ("parametric", "local", "dynamic")


@dataclass(frozen=True, slots=True)
class Cell:
    """One agent after one stage."""

    position: str | None
    """The letters this agent counts with after the stage (carried when it gave none now)."""
    status: CellStatus
    """`answered` this stage, replied `invalid` (position carried), or `silent` (position carried)."""

    def show(self) -> str:
        text = self.position or "-"
        return text if self.status == "answered" else f"{text}*"


@dataclass(frozen=True, slots=True)
class Intervention:
    kind: str
    """One of `INTERVENTIONS`."""
    detail: str = ""
    event_index: int | None = None
    """Index of the event in the transcript's `events` that records it."""
    to: tuple[str, ...] = ()
    """Who received a brief or verdict; the roles that joined for `recruit`."""
    group: str = ""
    """The calibrated backbone's discussion group (`g1`, `g2`) whose turns it came between."""

    def show(self) -> str:
        """`kind[group: detail -> to]`, e.g. `brief[between_gap -> cardiologist, neurologist]`."""
        inner = " -> ".join(x for x in (self.detail, ", ".join(self.to)) if x)
        if self.group:
            inner = f"{self.group}: {inner}" if inner else self.group
        return f"{self.kind}[{inner}]" if inner else self.kind


@dataclass(slots=True)
class Stage:
    label: str
    cells: dict[str, Cell]
    majority: str
    """Letters (`A`, `A,C`), `tie` or `none`."""
    state: State
    before: list[Intervention] = field(default_factory=list)
    event_index: int | None = None
    """The stage's first answer event (the final stage: the vote or decision event)."""
    joined: tuple[str, ...] = ()
    """Agents whose first stage this is (never set on the first stage)."""

    def letters(self) -> str:
        """`agent=A;agent2=B*` (`*`: no valid answer this stage, position carried; `-`: none yet)."""
        return ";".join(f"{name}={cell.show()}" for name, cell in self.cells.items())


@dataclass(frozen=True)
class Flip:
    """The majority changed from one stage to the next."""

    index: int
    """Index in `Trajectory.stages` of the stage the majority changed *into*."""
    label: str
    before_majority: str
    after_majority: str
    direction: Direction
    interventions: tuple[Intervention, ...]
    event_index: int | None
    decisive: bool
    """The last flip: from here on the majority stayed what the final answer is."""


@dataclass(slots=True)
class Trajectory:
    condition: str
    dataset: str
    qid: str
    repeat: int
    gold: tuple[str, ...]
    kind: Kind
    stages: list[Stage]
    """Answer stages, then the final stage (always last; the only one when nothing was answered)."""
    scored: bool = True
    """False for free-text items (no options): no letters to score."""
    error: str | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.dataset, self.qid, self.repeat)

    @property
    def first(self) -> Stage | None:
        """The first answer stage (None when the debate never answered, e.g. an early error)."""
        return self.stages[0] if len(self.stages) > 1 else None

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def transitions(self) -> list[tuple[Stage, Stage]]:
        """Consecutive stage pairs. An error row has no decision, so its last pair (into `final`) is
        left out: the debate's own turns before the failure still count."""
        pairs = list(zip(self.stages, self.stages[1:], strict=False))
        return pairs[:-1] if self.error and pairs else pairs

    def flips(self) -> list[Flip]:
        found: list[tuple[int, Stage, Stage]] = []
        for i, (a, b) in enumerate(self.transitions(), start=1):
            if a.majority != b.majority:
                found.append((i, a, b))
        out = []
        for n, (i, a, b) in enumerate(found):
            out.append(Flip(index=i, label=b.label, before_majority=a.majority, after_majority=b.majority,
                            direction=direction(a.state, b.state), interventions=tuple(b.before),
                            event_index=b.event_index, decisive=n == len(found) - 1 and not self.error))
        return out


def direction(before: str, after: str) -> Direction:
    """A majority change, by correctness: into the right answer, away from it, or between wrong
    positions (a tie or no position counts as not right)."""
    if after == "right":
        return "to_right"
    if before == "right":
        return "to_wrong"
    return "to_other_wrong"


def position_of(answer: object) -> str | None:
    """A parsed `answer` (a letter, or a list of letters) as a position; None when absent."""
    if answer is None:
        return None
    if isinstance(answer, list | tuple):
        letters = sorted({str(a) for a in answer})
        return ",".join(letters) if letters else None
    text = str(answer).strip()
    return text or None


def majority_of(positions: Sequence[str | None]) -> str:
    counts = Counter(p for p in positions if p)
    if not counts:
        return NO_POSITION
    top = max(counts.values())
    leaders = [p for p, c in counts.items() if c == top]
    return leaders[0] if len(leaders) == 1 else TIE


def state_of(majority: str, gold: Sequence[str], scoring: str, scored: bool = True) -> State:
    if not scored:
        return "unscored"
    if majority in (TIE, NO_POSITION):
        return "tie" if majority == TIE else "none"
    return "right" if score(majority.split(","), list(gold), scoring) else "wrong"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a transcript recorded for its row, beside its events: what `final`, the scoring and
    the trajectory's identity are read from (a missing transcript's stand-in has the row's own)."""

    condition: str
    dataset: str
    qid: str
    repeat: int
    answer: tuple[str, ...]
    gold: tuple[str, ...]
    correct: bool
    invalid: bool
    error: str | None
    scored: bool
    """False for free-text items (a question without options)."""


def outcome_of(doc: Mapping[str, Any]) -> Outcome:
    """A transcript document's outcome (`question`, `answer`, `gold` as `Store.commit` writes them)."""
    q = doc.get("question") or {}
    error = doc.get("error")
    return Outcome(condition=str(doc.get("condition", "")), dataset=str(q.get("dataset", "")),
                   qid=str(q.get("qid", "")), repeat=int(doc.get("repeat", 0) or 0),
                   answer=tuple(doc.get("answer") or ()),
                   gold=tuple(str(g) for g in (doc.get("gold") or q.get("gold") or ())),
                   correct=bool(doc.get("correct")), invalid=bool(doc.get("invalid")),
                   error=None if not error else error, scored=bool(q.get("options", True)))


def final_state(o: Outcome) -> State:
    """The recorded answer's state: error, unscored (free text), invalid, right or wrong."""
    if o.error:
        return "error"
    if not o.scored:
        return "unscored"
    if o.invalid or not o.answer:
        return "invalid"
    return "right" if o.correct else "wrong"


# -- flat views ---------------------------------------------------------------------------------


def transition_of(t: Trajectory) -> str:
    """`right->wrong` ... from the first stage's majority to the final answer; `error`, `free_text`."""
    if not t.scored:
        return "free_text"
    if t.error:
        return "error"
    first = t.first
    a = "invalid" if first is None or first.state in ("tie", "none") else first.state
    b = "invalid" if t.final.state == "invalid" else t.final.state
    return f"{a}->{b}"


def columns(t: Trajectory, prefix: str = "trajectory") -> dict[str, object]:
    """The per-question trajectory as flat scalar columns for `medpanel export`.

    `<p>.sNN.label|majority|letters|before` per stage (NN from 01, the final stage included), plus
    the first and final majorities, the transition, the flip count and the decisive flip (the last
    one: the stage where the majority became the final answer) with the interventions before it.
    """
    flips = t.flips()
    decisive = next((f for f in flips if f.decisive), None)
    first = t.first
    out: dict[str, object] = {
        f"{prefix}.kind": t.kind,
        f"{prefix}.stages": len(t.stages),
        f"{prefix}.first": first.majority if first else NO_POSITION,
        f"{prefix}.final": t.final.majority,
        f"{prefix}.transition": transition_of(t),
        f"{prefix}.path": " > ".join(s.majority for s in t.stages),
        f"{prefix}.flips": len(flips),
        f"{prefix}.flip_stage": decisive.label if decisive else "",
        f"{prefix}.flip_index": decisive.index + 1 if decisive else "",
        f"{prefix}.flip_from": decisive.before_majority if decisive else "",
        f"{prefix}.flip_direction": decisive.direction if decisive else "",
        f"{prefix}.flip_after": ("; ".join(x.show() for x in decisive.interventions) or "none") if decisive else "",
    }
    for n, s in enumerate(t.stages, start=1):
        p = f"{prefix}.s{n:02d}"
        out[f"{p}.label"] = s.label
        out[f"{p}.majority"] = s.majority
        out[f"{p}.letters"] = s.letters()
        out[f"{p}.before"] = "; ".join(x.show() for x in s.before)
    return out
