"""KAMAC (knowledge-gap-driven adaptive multi-agent collaboration, arXiv 2509.14998), re-implemented
from its described behaviour (the GPL-3.0 code, AnonymousSubmission361/KAMAC, was read for behaviour
only: nothing is copied).

| stage        | what happens                                                                         |
|--------------|--------------------------------------------------------------------------------------|
| `recruit`    | the recruiter seats `initial_agents` (1) specialist(s)                                |
| `assess`     | each gives an initial assessment and answer                                          |
| `gap`        | each turn (`rounds` 1 x `turns` 3), every specialist says whether the panel lacks     |
|              | knowledge and which specialist would have it. No gap from anyone: the discussion     |
|              | ends. A gap: the recruiter reads every gap report and recruits up to                  |
|              | `max_new_per_turn` (2) specialists (or none), never past `max_agents` (5)             |
| `assess`     | each recruited specialist, shown why it was called and the panel's answers, assesses |
| `discussion` | every specialist comments with its answer, seeing the panel's current answers         |
| `decision`   | the moderator decides by majority over the final answers (its answer type admits only |
|              | their letters; an invalid reply falls back to the coded majority)                     |

Deviations: KAMAC extends its turns when it recruits; here the turns are fixed (a recruited
specialist always joins the same turn's discussion). KAMAC sets no panel cap; `max_agents` keeps the
cost bounded. KAMAC deduplicates the gap reports with an assistant call; here the recruiter reads them
all in one call and is told the panel so it does not recruit a seated specialty twice.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model
from medpanel.agents.pipelines.base import ConditionPlan, Outcome, Pipeline, PipelineSettings, Summary
from medpanel.agents.pipelines.multiagent_common import (
    answer_key,
    ask_once,
    moderate,
    numbered,
    numbered_model,
    opinions_block,
    record_final,
)
from medpanel.agents.prompting import format_question
from medpanel.agents.roles import kamac as roles
from medpanel.agents.roles.kamac import PROMPTS, Gap
from medpanel.agents.types import Question, TranscriptEvent


class KamacSettings(PipelineSettings):
    initial_agents: int = Field(default=1, ge=1, le=5)
    """Specialists at the start (KAMAC's `--num_agents` default 1)."""
    rounds: int = Field(default=1, ge=1, le=5)
    """Gap-check rounds."""
    turns: int = Field(default=3, ge=1, le=10)
    """Gap-check turns per round (KAMAC's defaults: 1 round x 3 turns)."""
    max_new_per_turn: int = Field(default=2, ge=1, le=5)
    """Specialists the recruiter may add after one turn."""
    max_agents: int = Field(default=5, ge=1, le=10)
    """The panel cap (KAMAC sets none; this bounds the cost)."""

    @model_validator(mode="after")
    def _room(self) -> KamacSettings:
        if self.max_agents < self.initial_agents:
            raise ValueError(f"max_agents ({self.max_agents}) is below initial_agents ({self.initial_agents})")
        return self


class KamacSummary(Summary):
    method: str | None = None
    initial: list[str] | None = None
    recruited: list[dict[str, Any]] | None = None
    gaps_reported: int | None = None
    turns_run: int | None = None
    ended_by: str | None = None
    rule: str | None = None


class KamacPipeline(Pipeline[KamacSettings, ConditionPlan]):
    settings_model = KamacSettings
    summary_model = KamacSummary

    async def __call__(self, question: Question, plan: ConditionPlan, session: QuestionSession,
                       settings: KamacSettings) -> Outcome:
        q = format_question(question)
        recruiter_system = PROMPTS.render("recruiter_system")
        n0 = settings.initial_agents
        first = await ask_once(session, role="recruiter", name="recruiter", system=recruiter_system,
                               request=PROMPTS.render("recruit_initial", question=q, n=n0),
                               model=numbered_model("InitialRecruit", "expert", n0, "A specialty."),
                               step="recruit.initial")
        initial = numbered(first, "expert", n0) if first is not None else ["general medicine"] * n0
        a_type = answer_model(question.letters, multi=question.multi_answer)
        panel: dict[str, tuple[str, RoleAgent]] = {}
        answers: dict[str, str | None] = {}
        texts: dict[str, str] = {}

        def seat(specialty: str) -> RoleAgent:
            name = f"specialist_{len(panel) + 1}"
            agent = RoleAgent(session, name=name, role="specialist",
                              system_message=PROMPTS.render("expert", role=specialty))
            panel[name] = (specialty, agent)
            return agent

        def keep(name: str, parsed: Any) -> None:
            answers[name] = answer_key(parsed)
            texts[name] = f"({panel[name][0]}) {getattr(parsed, 'reasoning', '')}" if parsed is not None else ""

        for specialty in initial:
            agent = seat(specialty)
            keep(agent.name, await agent.speak(PROMPTS.render("assess", question=q), a_type, step="assess.initial"))

        recruited: list[dict[str, Any]] = []
        gaps_reported, turns_run, ended_by = 0, 0, "turns"
        for r in range(1, settings.rounds + 1):
            for t in range(1, settings.turns + 1):
                turns_run += 1
                gaps: list[str] = []
                for name, (specialty, agent) in list(panel.items()):
                    g = await agent.speak(PROMPTS.render("gap", turn=t, opinions=opinions_block(answers, texts)), Gap,
                                          step="gap.assess", round=r, turn=t)
                    if isinstance(g, Gap) and g.gap:
                        gaps.append(f"- {name} ({specialty}) needs a {g.expert or 'specialist'}: {g.reason}")
                gaps_reported += len(gaps)
                if not gaps:
                    ended_by = "no_gap"
                    session.record(TranscriptEvent(kind="note", role="pipeline", agent="kamac", step="gap.none",
                                                   round=r, turn=t, content="No specialist reports a knowledge gap; "
                                                                            "the discussion ends."))
                    break
                room = settings.max_agents - len(panel)
                new: list[str] = []
                if room > 0:
                    k = min(settings.max_new_per_turn, room)
                    rec = await ask_once(session, role="recruiter", name="recruiter", system=recruiter_system,
                                         request=PROMPTS.render("gap_recruit", question=q, k=k, gaps="\n".join(gaps),
                                                                panel=", ".join(s for s, _ in panel.values())),
                                         model=roles.gap_recruit_model(k), step="gap.recruit", round=r, turn=t)
                    if rec is not None:
                        count = int(rec.count)  # type: ignore[attr-defined]
                        new = [s for s in numbered(rec, "expert", k)[:count]]
                else:
                    full = f"The panel is full ({len(panel)} of {settings.max_agents}); nobody recruited."
                    session.record(TranscriptEvent(kind="note", role="pipeline", agent="kamac",
                                                   step="gap.panel_full", round=r, turn=t, content=full))
                reason = "; ".join(g.lstrip("- ") for g in gaps)
                for specialty in new:
                    agent = seat(specialty)
                    recruited.append({"round": r, "turn": t, "agent": agent.name, "specialty": specialty})
                    keep(agent.name, await agent.speak(
                        PROMPTS.render("assess_joined", question=q, reason=reason,
                                       opinions=opinions_block(answers, texts)),
                        a_type, step="assess.recruited", round=r, turn=t))
                if new:
                    session.record(TranscriptEvent(kind="note", role="recruiter", agent="recruiter",
                                                   step="gap.recruited", round=r, turn=t, content=", ".join(new),
                                                   data={"recruited": new, "gaps": gaps}))
                shown = opinions_block(answers, texts)
                for name, (_, agent) in panel.items():
                    keep(name, await agent.speak(PROMPTS.render("comment", turn=t, opinions=shown), a_type,
                                                 step="discussion.comment", round=r, turn=t))
            if ended_by == "no_gap":
                break
        final, decided = await moderate(session, question, system=PROMPTS.render("moderator_system"),
                                        request=PROMPTS.render("moderate", question=q,
                                                               opinions=opinions_block(answers, texts)),
                                        answers=answers, method="kamac")
        record_final(session, "kamac", final, rule=decided["rule"], panel=[s for s, _ in panel.values()])
        summary = KamacSummary.model_validate({
            "method": "kamac", "initial": initial, "recruited": recruited, "gaps_reported": gaps_reported,
            "turns_run": turns_run, "ended_by": ended_by, "rule": decided["rule"]})
        return Outcome(answer=final, invalid=not final, summary=summary)
