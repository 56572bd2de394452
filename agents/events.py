"""What an event means to the debate: the typed acts a transcript event can carry.

A `TranscriptEvent` says who did what (`kind`, `role`, `agent`, `step`, the messages and reply);
its `act` says what that was in the debate, in one of the types below, so the analysis reads the
debate from types and never from a pipeline's step names. The transition and attribution tables
are built from these acts alone:

| act            | on an event of kind | means                                                          |
|----------------|---------------------|----------------------------------------------------------------|
| `AnswerAt`     | `call`              | the reply is an agent's answer at a stage of the debate         |
| `Critique`     | `call`              | the reply is a critique of the panel's answers (its fields say  |
|                |                     | whether it found a material weakness, and its gap)              |
| `Brief`        | `note`              | an evidence brief was added to some agents' prompts             |
| `Recruitment`  | `note`              | specialists joined the panel                                    |
| `FocusedRound` | `note`              | the next turn answers a challenge point by point                |
| `GroupStart`   | `note`              | a group of a multi-group panel starts its own debate            |
| `Vote`         | `vote`              | the answers were counted into one, by a named rule              |
| `PathwayAnswer`| `call`              | the reply is a candidate answer drawn from one evidence pathway |
| `Verdict`      | `call`              | the reply is an adjudicator's verdict on the candidates         |
| `FollowUpSearch`| `note`             | a targeted follow-up search's evidence joined the adjudication  |
| `Ruling`       | `note`              | a rule over the verdict ruled (an override guard, an audit, a   |
|                |                     | format gate), with its outcome                                  |

The last four serve a method that adjudicates evidence rather than debates (CLEAR): its candidates
are pathways, not discussants, so a `PathwayAnswer` is no `AnswerAt` and the debate's tables never
count it; the method's reader (`methods/clear/trajectory.py`) builds its pathway and verdict stages
from them.

An event with no act (`None`: a search, a triage call, a note of the pipeline's own) is the
method's business; `step` and `data` stay free for it. `data` keeps its own copy of what an act
holds, so a reader of `data` (the viewer, the Inspect log) sees what it always saw.

A method gets every trajectory, transition and attribution table by marking its answers:
`agent.speak(request, Answer, step="my_step", act=AnswerAt(stage="opinion"))`.

Transcripts written before acts existed (format 1 and earlier), and CLEAR's of format 2 (written
before its roles marked their acts), are given theirs when read (`experiments.run.store.records_v1`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class AnswerAt(BaseModel):
    """A call whose reply is an agent's answer at one stage of the debate (its `parsed["answer"]`).

    Consecutive answers with the same `stage` form one stage of the trajectory; an agent that
    answers again in a later stage changes its position there. A re-ask keeps the act of the call
    it repeats, so its valid answer stands for the stage.
    """

    model_config = _FROZEN

    type: Literal["answer_at"] = "answer_at"
    stage: str
    """The stage's label in the tables (`r1t2` for round 1, turn 2; `initial`, `answer` ...)."""
    voter: str | None = None
    """Whose position the answer is when not the calling agent's (self-consistency: `sample_3`)."""

    @classmethod
    def turn(cls, round: int, turn: int) -> AnswerAt:
        """The answer of a panel's turn: stage `r<round>t<turn>`."""
        return cls(stage=f"r{round}t{turn}")


class Critique(BaseModel):
    """A call whose reply criticises the panel's answers: a material weakness in its
    `material_weakness` field, the kind of gap in `gap_type` (the challenger's `Critique` reply)."""

    model_config = _FROZEN

    type: Literal["critique"] = "critique"


ADJUDICATION = "clear"
"""A `Brief.source`: the brief is an adjudication's verdict (its route and guard given), not a curator's."""


class Brief(BaseModel):
    """An evidence brief added to the prompts of `received_by` (empty: it reached nobody)."""

    model_config = _FROZEN

    type: Literal["brief"] = "brief"
    received_by: tuple[str, ...] = ()
    trigger: str = ""
    """What asked for it (`upfront`, `gate`, `challenger` ...)."""
    source: str = "knowledge"
    """`knowledge` (the evidence curator) or `clear` (a CLEAR adjudication given to the panel:
    `ADJUDICATION`)."""
    route: str | None = None
    """`clear` only: the adjudication's route."""
    guard: str = "not_triggered"
    """`clear` only: the override guard's outcome."""


class Recruitment(BaseModel):
    """Specialists that joined the panel (`recruited`: their roles)."""

    model_config = _FROZEN

    type: Literal["recruitment"] = "recruitment"
    recruited: tuple[str, ...] = ()
    trigger: str = ""


class FocusedRound(BaseModel):
    """The next turn is sent a challenge to answer point by point (routed coordination)."""

    model_config = _FROZEN

    type: Literal["focused_round"] = "focused_round"
    gap_type: str = ""


class GroupStart(BaseModel):
    """A group of a multi-group panel starts its debate; its agents are named `<group>:<agent>`."""

    model_config = _FROZEN

    type: Literal["group_start"] = "group_start"
    group: str


class Vote(BaseModel):
    """The answers counted into one (the event's `content`: the winning position)."""

    model_config = _FROZEN

    type: Literal["vote"] = "vote"
    rule: str = ""
    """The counting rule (`majority`, `moderator`, `support`, `blocks` ...)."""
    tied: bool = False
    """The plain count was tied, and the rule settled it."""
    counts: dict[str, float] = Field(default_factory=dict)
    """Position -> its count under the rule."""
    decided_by: str = ""
    """`-ind`: what decided the answer (`agreement`: nothing was weighed)."""

    @classmethod
    def of(cls, record: Mapping[str, object]) -> Vote:
        """The act of a tally's record as the vote events keep it in `data` (`rule`, `tied`, `counts`,
        `outcome.decided_by`); a count that is not a number is not one."""
        counts, outcome = record.get("counts"), record.get("outcome")
        numbers = {str(k): v for k, v in (counts.items() if isinstance(counts, Mapping) else ())
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        return cls(rule=str(record.get("rule", "")), tied=bool(record.get("tied")), counts=numbers,
                   decided_by=str(outcome.get("decided_by", "")) if isinstance(outcome, Mapping) else "")


class PathwayAnswer(BaseModel):
    """A call whose reply is the candidate answer of one evidence pathway (its `parsed["answer"]`):
    CLEAR's parametric, local and dynamic candidates. A re-ask keeps it, as an `AnswerAt`'s."""

    model_config = _FROZEN

    type: Literal["pathway_answer"] = "pathway_answer"
    pathway: str
    """The pathway's name (`parametric`, `local`, `dynamic`): the cell's name in the pathways stage."""


class Verdict(BaseModel):
    """A call whose reply is an adjudicator's verdict on the candidates (CLEAR's verifier); the
    event's `round` is the verification round. The verdict that stands (after any fallback) is the
    decision's to record."""

    model_config = _FROZEN

    type: Literal["verdict"] = "verdict"


class FollowUpSearch(BaseModel):
    """A targeted follow-up search whose evidence joined the adjudication's bundle, in the event's
    `round`."""

    model_config = _FROZEN

    type: Literal["follow_up_search"] = "follow_up_search"
    purpose: str = ""
    """What asked for it (`needs_more_search`: the verifier; `guard`, `audit`: a rule's challenge)."""


class Ruling(BaseModel):
    """A rule over the verdict ruled: `guard` (an override guard), `audit` (a challenge audit),
    `format_gate` (the answer checked against the options)."""

    model_config = _FROZEN

    type: Literal["ruling"] = "ruling"
    rule: str
    outcome: str
    """The rule's outcome (`granted`, `rejected_no_high`, `kept_below_threshold` ...; a format gate's:
    `valid`, or why it rejected the answer)."""
    intervened: bool = True
    """The ruling touched the decision (every guard and audit ruling; a format gate that rejected):
    the trajectory shows it as an intervention before the final answer."""


Act = Annotated[AnswerAt | Critique | Brief | Recruitment | FocusedRound | GroupStart | Vote | PathwayAnswer
                | Verdict | FollowUpSearch | Ruling, Field(discriminator="type")]
"""Every act an event can carry, told apart by `type`."""

__all__ = ["Act", "AnswerAt", "Brief", "Critique", "FocusedRound", "FollowUpSearch", "GroupStart", "PathwayAnswer",
           "Recruitment", "Ruling", "Verdict", "Vote"]
