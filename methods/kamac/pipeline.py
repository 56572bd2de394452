"""KAMAC (knowledge-gap-driven adaptive multi-agent collaboration, arXiv 2509.14998), re-implemented
from the behaviour of its code (AnonymousSubmission361/KAMAC `main_kamac.py`, GPL-3.0: read for
behaviour only, nothing is copied), run as its README runs it (`--auto_recruit`, one initial
agent, no exemplars). MedAgentsBench has no copy of KAMAC. `docs/methods/kamac.md` lists the
differences.

| stage        | what happens                                                                         |
|--------------|--------------------------------------------------------------------------------------|
| `recruit`    | the recruiter (one agent for the whole question) seats `initial_agents` (1)          |
| `assess`     | each gives an initial assessment and answer                                          |
| each turn    | (`rounds` 1 x `turns` 3) every specialist in turn: the talk / choose / message debate |
|              | (`multiagent_debate`), then "is there a knowledge gap?" (yes / no, which specialist)  |
| `gap`        | any gap: the assistant (one agent for the question, keeping its history) sifts every |
|              | specialist's gap reply, the recruiter recruits any number of new specialists or none. |
|              | None: one more turn. New ones: each assesses (shown the comments the turn began with) |
|              | and takes its debate turn; on the last turn, one more turn is added                   |
| `discussion` | when anyone talked in the turn (and it did not skip a recruitment), every specialist  |
|              | gives its answer again                                                               |
| end          | a turn in which nobody talks (the turn's recruits included) ends the discussion, once |
|              | its gap is dealt with; a turn with talk and no gap goes on to the next turn           |
| `decision`   | the moderator decides by majority over the comments the last turn began with (the    |
|              | code's `turn_comments`: a last turn's own answers never reach it); it may pick any    |
|              | option; an invalid reply falls back to the coded majority                             |

The code adds turns without bound; here `max_turns` (10) bounds a round, and `max_agents` (10) the
panel (the code has neither): both are declared, and a run that meets them records it. As in the
code, the turn count (extensions included) and the turns' comments carry into a later round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import Field, model_validator

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply
from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings
from medpanel.agents.pipelines.multiagent_common import (
    answer_key,
    labelled,
    method_answer,
    moderate,
    numbered_model,
    opinions_block,
    record_final,
)
from medpanel.agents.pipelines.multiagent_debate import Member, TurnLog, roster, talk_turn, turn_note
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.prompting import format_question
from medpanel.agents.summary import Fact, Summary
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.methods.kamac.roles import kamac as roles
from medpanel.methods.kamac.roles.kamac import PROMPTS, Gap, GapSummary


class KamacSettings(PipelineSettings):
    initial_agents: int = Field(default=1, ge=1, le=5)
    """Specialists at the start (KAMAC's `--num_agents` default 1)."""
    rounds: int = Field(default=1, ge=1, le=5)
    """Gap-check rounds."""
    turns: int = Field(default=3, ge=1, le=10)
    """Turns per round before any extension (KAMAC's defaults: 1 round x 3 turns)."""
    max_turns: int = Field(default=10, ge=1, le=30)
    """A round's turns, extensions included (they carry into a later round, as the code's `num_turns`;
    the code has no bound; declared)."""
    max_agents: int = Field(default=10, ge=1, le=20)
    """The panel's size (the code has no bound; declared)."""

    @model_validator(mode="after")
    def _room(self) -> KamacSettings:
        if self.max_agents < self.initial_agents:
            raise ValueError(f"max_agents ({self.max_agents}) is below initial_agents ({self.initial_agents})")
        if self.max_turns < self.turns:
            raise ValueError(f"max_turns ({self.max_turns}) is below turns ({self.turns})")
        return self


class Recruit(Fact):
    """A specialist who joined the panel mid-discussion, and when."""

    round: int
    turn: int
    agent: str
    specialty: str


class KamacSummary(Summary):
    method: str | None = None
    initial: list[str] | None = None
    recruited: list[Recruit] | None = None
    gaps_reported: int | None = None
    turns_run: int | None = None
    messages: int | None = None
    ended_by: str | None = None
    rule: str | None = None


def _note(session: QuestionSession, step: str, content: str, r: int = 0, t: int = 0, **data: Any) -> None:
    session.record(TranscriptEvent(kind="note", role="pipeline", agent="kamac", step=step, round=r, turn=t,
                                   content=content, data=data))


class Opinion(NamedTuple):
    answer: str | None
    text: str


Comments = dict[str, Opinion]
"""One set of specialists' comments: name -> their answer and reasoning (a turn's `turn_comments`)."""


def shown(comments: Comments) -> str:
    """Comments as the panel is shown them ("(none)": a set the code left empty)."""
    if not comments:
        return "(none)"
    return opinions_block({k: o.answer for k, o in comments.items()}, {k: o.text for k, o in comments.items()})


@dataclass
class _Panel:
    """The specialists seated so far."""

    session: QuestionSession
    q: str
    a_type: type[AnswerReply]
    members: list[Member] = field(default_factory=list)

    def seat(self, specialty: str) -> Member:
        name = f"specialist_{len(self.members) + 1}"
        m = Member(name, specialty, RoleAgent(self.session, name=name, role="specialist",
                                              system_message=PROMPTS.render("expert", role=specialty)))
        self.members.append(m)
        return m

    async def assess(self, m: Member, request: str, into: Comments, *, step: str, r: int = 0, t: int = 0) -> None:
        parsed = await m.agent.speak(request, self.a_type, step=step, round=r, turn=t)
        into[m.name] = Opinion(answer_key(parsed), f"({m.specialty}) {parsed.reasoning}" if parsed is not None else "")

    async def answer_again(self, r: int, t: int) -> Comments:
        fresh: Comments = {}
        for m in self.members:
            await self.assess(m, PROMPTS.render("final", question=self.q), fresh, step="discussion.answer", r=r, t=t)
        return fresh


def _gap_line(m: Member, g: Gap | None) -> str:
    if g is None:
        return f"- {m.name} ({m.specialty}): (no valid reply)"
    if not g.gap:
        return f"- {m.name} ({m.specialty}): no gap"
    return f"- {m.name} ({m.specialty}) needs a {g.expert or 'specialist'}: {g.reason}"


async def _gap_reports(panel: _Panel, log: TurnLog, shown_to: Callable[[Member], str], r: int,
                       t: int) -> tuple[list[str], int]:
    """Every specialist in turn takes its debate turn, then says whether the panel lacks a specialty.
    Every reply, a "no" included, as the code's gap log (`round_gap`) keeps them; and how many said yes."""
    replies: list[str] = []
    found = 0
    for m in list(panel.members):
        await talk_turn(panel.session, panel.members, log, prompts=PROMPTS, shown=shown_to, method="kamac", round=r,
                        turn=t, speakers=[m])
        g = await m.agent.speak(PROMPTS.render("gap", turn=t, roster=roster(panel.members)), Gap,
                                step="gap.assess", round=r, turn=t)
        found += isinstance(g, Gap) and g.gap
        replies.append(_gap_line(m, g if isinstance(g, Gap) else None))
    return replies, found


async def _recruit_for_gaps(panel: _Panel, recruiter: RoleAgent, assistant: RoleAgent, settings: KamacSettings,
                            gaps: list[str], *, r: int, t: int, start: Comments, log: TurnLog) -> list[Member]:
    """The assistant sifts the gap replies and the recruiter seats new specialists, who assess (shown
    the comments the turn began with; theirs join them) and take their debate turn. The recruits, or
    none (the code's `<skip recruitment>`)."""
    session, q, members = panel.session, panel.q, panel.members
    panel_names = ", ".join(m.specialty for m in members)
    # One assistant for the whole question, keeping its history (the code's `DiscussionPanel.assistant`).
    sifted = await assistant.speak(PROMPTS.render("gap_summary", question=q, panel=panel_names, gaps="\n".join(gaps)),
                                   GapSummary, step="gap.summary", round=r, turn=t)
    sifted_text = sifted.recommendations if isinstance(sifted, GapSummary) else "\n".join(gaps)
    room = settings.max_agents - len(members)
    new: list[str] = []
    if room > 0:
        rec = await recruiter.speak(PROMPTS.render("gap_recruit", question=q, k=room, gaps=sifted_text,
                                                   panel=panel_names),
                                    roles.gap_recruit_model(room), step="gap.recruit", round=r, turn=t)
        if rec is not None:
            new = labelled(rec.slots, "expert")[:rec.count]
    else:
        _note(session, "gap.panel_full", f"The panel is full ({len(members)} of {settings.max_agents})"
                                         "; nobody recruited.", r, t)
    if not new:
        return []
    began = shown(start)
    joined = [panel.seat(s) for s in new]
    for j in joined:
        await panel.assess(j, PROMPTS.render("assess_joined", question=q, opinions=began), start,
                           step="assess.recruited", r=r, t=t)
    _note(session, "gap.recruited", ", ".join(new), r, t, recruited=new, gaps=gaps)
    # The recruits' first-turn prompt shows the comments with their own assessments in.
    now = shown(start)

    def shown_joined(m: Member) -> str:
        return now if t == 1 else log.for_(m.name, members)

    await talk_turn(session, members, log, prompts=PROMPTS, shown=shown_joined, method="kamac",
                    round=r, turn=t, speakers=joined)
    return joined


class KamacPipeline(Pipeline[KamacSettings, ConditionPlan]):
    settings_model = KamacSettings
    summary_model = KamacSummary

    async def __call__(self, question: Question, plan: ConditionPlan, session: QuestionSession,
                       settings: KamacSettings) -> Outcome:
        q = format_question(question)
        recruiter = RoleAgent(session, name="recruiter", role="recruiter",
                              system_message=PROMPTS.render("recruiter_system"))
        assistant = RoleAgent(session, name="assistant", role="assistant",
                              system_message=PROMPTS.render("assistant_system"))
        n0 = settings.initial_agents
        first = await recruiter.speak(PROMPTS.render("recruit_initial", question=q, n=n0),
                                      numbered_model("InitialRecruit", "expert", n0, "A specialty."),
                                      step="recruit.initial")
        initial = labelled(first.slots, "expert") if first is not None else ["general medicine"] * n0
        panel = _Panel(session, q, method_answer(question))
        opening: Comments = {}
        for specialty in initial:
            await panel.assess(panel.seat(specialty), PROMPTS.render("assess", question=q), opening,
                               step="assess.initial")

        # The code's `turn_comments`: turn index -> the comments that turn began with. A turn with talk
        # writes the next one's (everyone answers again); a skipped recruitment writes none, so the next
        # turn begins from what that index last held (nothing, in the first round). The discussion's
        # result is what its last turn began with, so a last turn's own answers never reach the moderator.
        board: dict[int, Comments] = {}
        result = opening
        recruited: list[Recruit] = []
        gaps_reported = turns_run = messages = 0
        ended_by, turns = "turns", settings.turns  # the turn count carries into later rounds, as the code's
        for r in range(1, settings.rounds + 1):
            board[0], i, talked = result, 0, 0
            while True:
                t = i + 1
                turns_run += 1
                start = board.setdefault(i, {})
                began, log = shown(start), TurnLog()

                def shown_to(m: Member, log: TurnLog = log, t: int = t, began: str = began) -> str:
                    # The first turn shows the comments; later turns the messages sent so far this turn.
                    return began if t == 1 else log.for_(m.name, panel.members)

                gaps, found = await _gap_reports(panel, log, shown_to, r, t)
                gaps_reported += found
                extend = skipped = False
                if found:
                    joined = await _recruit_for_gaps(panel, recruiter, assistant, settings, gaps, r=r, t=t,
                                                     start=start, log=log)
                    recruited += [Recruit(round=r, turn=t, agent=j.name, specialty=j.specialty) for j in joined]
                    # No recruit: one more turn, and no new answers this turn.
                    skipped = not joined
                    extend = skipped or t == turns
                turn_note(session, log, method="kamac", round=r, turn=t)
                talked = log.talked
                if talked and not skipped:
                    board[i + 1] = await panel.answer_again(r, t)
                messages += sum(len(v) for v in log.inbox.values())
                if extend and turns < settings.max_turns:
                    turns += 1
                    board[turns] = {}  # the code's `update_with_discussion` clears that index
                elif extend:
                    _note(session, "turns.capped", f"The round has reached max_turns ({settings.max_turns}).", r, t)
                i += 1
                if talked == 0:
                    ended_by = "silence"
                    _note(session, "discussion.end", "Nobody wanted to talk this turn: the discussion ends.", r, t)
                    break
                if i >= turns:
                    break
            result = board[i - 1]
            if talked == 0:
                break
        if not result:
            _note(session, "decision.no_comments", "The last turn began from no comments (a skipped recruitment "
                                                   "wrote none): the moderator decides from the question alone.")
        final, decided = await moderate(session, question, system=PROMPTS.render("moderator_system"),
                                        request=PROMPTS.render("moderate", question=q, opinions=shown(result)),
                                        answers={k: o.answer for k, o in result.items()}, method="kamac")
        record_final(session, "kamac", final, rule=decided["rule"], panel=[m.specialty for m in panel.members])
        summary = KamacSummary(method="kamac", initial=initial, recruited=recruited, gaps_reported=gaps_reported,
                               turns_run=turns_run, messages=messages, ended_by=ended_by, rule=decided["rule"])
        return Outcome(answer=final, invalid=not final, summary=summary)
