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
| `gap`        | any gap: the assistant sifts the gap reports, the recruiter recruits any number of   |
|              | new specialists or none. None: the round gets one more turn. New ones: each assesses  |
|              | (shown the panel's opinions) and takes its debate turn; on the round's last turn, one |
|              | more turn is added                                                                   |
| `discussion` | when anyone talked in the turn (and it did not skip a recruitment), every specialist  |
|              | gives its answer again                                                               |
| end          | a turn in which nobody talks (the turn's recruits included) ends the discussion, once |
|              | its gap is dealt with; a turn with talk and no gap goes on to the next turn           |
| `decision`   | the moderator decides by majority over the latest answers (its answer type admits    |
|              | only their letters; an invalid reply falls back to the coded majority)                |

The code adds turns without bound; here `max_turns` (10) bounds a round, and `max_agents` (10) the
panel (the code has neither): both are declared, and a run that meets them records it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply, answer_model
from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings
from medpanel.agents.pipelines.multiagent_common import (
    answer_key,
    ask_once,
    labelled,
    moderate,
    numbered_model,
    opinions_block,
    record_final,
)
from medpanel.agents.pipelines.multiagent_debate import Member, TurnLog, roster, talk_turn, turn_note
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.prompting import format_question
from medpanel.agents.roles import kamac as roles
from medpanel.agents.roles.kamac import PROMPTS, Gap, GapSummary
from medpanel.agents.summary import Fact, Summary
from medpanel.agents.types import Question, TranscriptEvent


class KamacSettings(PipelineSettings):
    initial_agents: int = Field(default=1, ge=1, le=5)
    """Specialists at the start (KAMAC's `--num_agents` default 1)."""
    rounds: int = Field(default=1, ge=1, le=5)
    """Gap-check rounds."""
    turns: int = Field(default=3, ge=1, le=10)
    """Turns per round before any extension (KAMAC's defaults: 1 round x 3 turns)."""
    max_turns: int = Field(default=10, ge=1, le=30)
    """A round's turns, extensions included (the code has no bound; declared)."""
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


@dataclass
class _Panel:
    """The specialists seated so far, each with its latest answer and reasoning."""

    session: QuestionSession
    q: str
    a_type: type[AnswerReply]
    members: list[Member] = field(default_factory=list)
    answers: dict[str, str | None] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    def seat(self, specialty: str) -> Member:
        name = f"specialist_{len(self.members) + 1}"
        m = Member(name, specialty, RoleAgent(self.session, name=name, role="specialist",
                                              system_message=PROMPTS.render("expert", role=specialty)))
        self.members.append(m)
        return m

    def keep(self, m: Member, parsed: AnswerReply | None) -> None:
        self.answers[m.name] = answer_key(parsed)
        self.texts[m.name] = f"({m.specialty}) {parsed.reasoning}" if parsed is not None else ""

    def opinions(self) -> str:
        return opinions_block(self.answers, self.texts)

    async def answer_again(self, r: int, t: int) -> None:
        for m in self.members:
            self.keep(m, await m.agent.speak(PROMPTS.render("final", question=self.q), self.a_type,
                                             step="discussion.answer", round=r, turn=t))


async def _gap_reports(panel: _Panel, log: TurnLog, shown: Callable[[Member], str], r: int, t: int) -> list[str]:
    """Every specialist in turn takes its debate turn, then says whether the panel lacks a specialty."""
    gaps: list[str] = []
    for m in list(panel.members):
        await talk_turn(panel.session, panel.members, log, prompts=PROMPTS, shown=shown, method="kamac", round=r,
                        turn=t, speakers=[m])
        g = await m.agent.speak(PROMPTS.render("gap", turn=t, roster=roster(panel.members)), Gap,
                                step="gap.assess", round=r, turn=t)
        if isinstance(g, Gap) and g.gap:
            gaps.append(f"- {m.name} ({m.specialty}) needs a {g.expert or 'specialist'}: {g.reason}")
    return gaps


async def _recruit_for_gaps(panel: _Panel, recruiter: RoleAgent, settings: KamacSettings, gaps: list[str], *,
                            r: int, t: int, opinions: str, log: TurnLog) -> list[Member]:
    """The assistant sifts the gap reports and the recruiter seats new specialists, who assess and take
    their debate turn. The recruits, or none (the code's `<skip recruitment>`)."""
    session, q, members = panel.session, panel.q, panel.members
    panel_names = ", ".join(m.specialty for m in members)
    sifted = await ask_once(session, role="assistant", name="assistant", system=PROMPTS.render("assistant_system"),
                            request=PROMPTS.render("gap_summary", question=q, panel=panel_names,
                                                   gaps="\n".join(gaps)),
                            model=GapSummary, step="gap.summary", round=r, turn=t)
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
    joined = [panel.seat(s) for s in new]
    for j in joined:
        panel.keep(j, await j.agent.speak(PROMPTS.render("assess_joined", question=q, opinions=opinions),
                                          panel.a_type, step="assess.recruited", round=r, turn=t))
    _note(session, "gap.recruited", ", ".join(new), r, t, recruited=new, gaps=gaps)
    # The recruits' first-turn prompt shows the opinions with their own assessments in.
    now = panel.opinions()

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
        n0 = settings.initial_agents
        first = await recruiter.speak(PROMPTS.render("recruit_initial", question=q, n=n0),
                                      numbered_model("InitialRecruit", "expert", n0, "A specialty."),
                                      step="recruit.initial")
        initial = labelled(first.slots, "expert") if first is not None else ["general medicine"] * n0
        panel = _Panel(session, q, answer_model(question.letters, multi=question.multi_answer))
        for specialty in initial:
            m = panel.seat(specialty)
            panel.keep(m, await m.agent.speak(PROMPTS.render("assess", question=q), panel.a_type,
                                              step="assess.initial"))

        recruited: list[Recruit] = []
        gaps_reported = turns_run = messages = 0
        ended_by = "turns"
        for r in range(1, settings.rounds + 1):
            turns, t = settings.turns, 0
            talked = 0
            while True:
                t += 1
                turns_run += 1
                opinions = panel.opinions()
                log = TurnLog()

                def shown(m: Member, log: TurnLog = log, t: int = t, opinions: str = opinions) -> str:
                    # The first turn shows the panel's opinions; later turns the messages sent so far this turn.
                    return opinions if t == 1 else log.for_(m.name, panel.members)

                gaps = await _gap_reports(panel, log, shown, r, t)
                gaps_reported += len(gaps)
                extend = skipped = False
                if gaps:
                    joined = await _recruit_for_gaps(panel, recruiter, settings, gaps, r=r, t=t, opinions=opinions,
                                                     log=log)
                    recruited += [Recruit(round=r, turn=t, agent=j.name, specialty=j.specialty) for j in joined]
                    # No recruit: one more turn, and no new answers this turn.
                    skipped = not joined
                    extend = skipped or t == turns
                turn_note(session, log, method="kamac", round=r, turn=t)
                if log.talked and not skipped:
                    await panel.answer_again(r, t)
                messages += sum(len(v) for v in log.inbox.values())
                talked = log.talked
                if extend and turns < settings.max_turns:
                    turns += 1
                elif extend:
                    _note(session, "turns.capped", f"The round has reached max_turns ({settings.max_turns}).", r, t)
                if talked == 0:
                    ended_by = "silence"
                    _note(session, "discussion.end", "Nobody wanted to talk this turn: the discussion ends.", r, t)
                    break
                if t >= turns:
                    break
            if talked == 0:
                break
        final, decided = await moderate(session, question, system=PROMPTS.render("moderator_system"),
                                        request=PROMPTS.render("moderate", question=q, opinions=panel.opinions()),
                                        answers=panel.answers, method="kamac")
        record_final(session, "kamac", final, rule=decided["rule"], panel=[m.specialty for m in panel.members])
        summary = KamacSummary(method="kamac", initial=initial, recruited=recruited, gaps_reported=gaps_reported,
                               turns_run=turns_run, messages=messages, ended_by=ended_by, rule=decided["rule"])
        return Outcome(answer=final, invalid=not final, summary=summary)
