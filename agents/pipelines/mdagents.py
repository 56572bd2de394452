"""MDAgents (Kim et al., "MDAgents: An Adaptive Collaboration of LLMs for Medical Decision-Making",
NeurIPS 2024), re-implemented from its described behaviour (mitmedialab/MDAgents has no licence:
nothing is copied). A separate method from the seed's calibrated backbone (`calibrated.py`).

| stage      | what happens                                                                           |
|------------|----------------------------------------------------------------------------------------|
| `triage`   | one call rates the question low / moderate / high (an invalid reply routes to          |
|            | `invalid_route`, low as in the original, and says so)                                  |
| `solo`     | low: `exemplars` (5) solved examples drawn from `exemplar_file` (never the question    |
|            | itself), one rationale call each, then one expert answers with them                    |
| `mdt`      | moderate: the recruiter seats `mdt_experts` (5) with a lead (the hierarchy); each      |
|            | gives an initial answer. Unanimous: the discussion is skipped. Otherwise up to         |
|            | `rounds` (5) rounds: the assistant summarises, then up to `turns` (5) turns in which   |
|            | every expert may send one message to one expert or to everyone (a turn with no message |
|            | ends the round); every expert answers again; a unanimous round ends the discussion     |
| `ict`      | high: the recruiter forms `ict_groups` (3) teams of `ict_members` (3); in order, each  |
|            | lead plans, each other member investigates, the lead writes the report; later teams    |
|            | read the earlier reports                                                               |
| `decision` | mdt: the moderator decides by majority over the final answers (its answer type admits  |
|            | only their letters; an invalid reply falls back to the coded majority); ict: the final |
|            | decision maker answers from every report; solo: the expert's answer is final           |
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model, letters_of
from medpanel.agents.pipelines.base import ConditionPlan, Outcome, Pipeline, PipelineSettings, Summary
from medpanel.agents.pipelines.multiagent_common import (
    answer_key,
    ask_once,
    moderate,
    opinions_block,
    record_final,
    unanimous,
)
from medpanel.agents.prompting import format_question
from medpanel.agents.roles import mdagents as roles
from medpanel.agents.roles.mdagents import PROMPTS, Complexity, Rationale, Text, Triage
from medpanel.agents.types import Question, TranscriptEvent


class MDAgentsSettings(PipelineSettings):
    rounds: int = Field(default=5, ge=1, le=10)
    """MDT discussion rounds (the original code's 5; the seed paper's own MDT uses 3)."""
    turns: int = Field(default=5, ge=1, le=10)
    """Message turns per round (the original code's 5)."""
    mdt_experts: int = Field(default=5, ge=2, le=10)
    """Experts the recruiter seats in the moderate route's MDT (one of them the lead)."""
    ict_groups: int = Field(default=3, ge=2, le=6)
    """Teams of the high route's ICT."""
    ict_members: int = Field(default=3, ge=2, le=6)
    """Clinicians per ICT team (a lead and its members)."""
    exemplars: int = Field(default=5, ge=0, le=20)
    """Solved examples for the low route (the original's 5 from the training split)."""
    exemplar_file: str | None = None
    """A JSONL of solved questions (MedAgentsBench shape: question, options, answer_idx) from a split
    that is not evaluated. None: the low route answers with no examples (recorded)."""
    invalid_route: Complexity = "low"
    """Where an invalid triage reply goes (the original defaults to its basic route)."""

    @field_validator("exemplar_file")
    @classmethod
    def _exists(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"no file {v!r}: give a JSONL of solved questions outside the evaluated split")
        return v


class MDAgentsSummary(Summary):
    method: str | None = None
    complexity: str | None = None
    route_from: str | None = None
    exemplars: list[str] | None = None
    experts: list[str] | None = None
    lead: str | None = None
    rounds_run: int | None = None
    messages: int | None = None
    consensus: bool | None = None
    teams: list[dict[str, Any]] | None = None
    rule: str | None = None


@functools.lru_cache(maxsize=8)
def _exemplar_pool(path: str) -> tuple[dict[str, Any], ...]:
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows.append({"question": row["question"], "options": row["options"], "answer_idx": row["answer_idx"]})
    return tuple(rows)


def draw_exemplars(question: Question, settings: MDAgentsSettings) -> list[dict[str, Any]]:
    """`exemplars` solved examples, seeded by the question's key; a row with the question's own text is
    never drawn (so the evaluated question cannot be its own example)."""
    if settings.exemplar_file is None or settings.exemplars == 0:
        return []
    pool = [r for r in _exemplar_pool(settings.exemplar_file) if r["question"].strip() != question.text.strip()]
    return random.Random(f"mdagents/{question.key}").sample(pool, min(settings.exemplars, len(pool)))


class MDAgentsPipeline(Pipeline[MDAgentsSettings, ConditionPlan]):
    settings_model = MDAgentsSettings
    summary_model = MDAgentsSummary

    async def __call__(self, question: Question, plan: ConditionPlan, session: QuestionSession,
                       settings: MDAgentsSettings) -> Outcome:
        q = format_question(question)
        triage = await ask_once(session, role="triage", name="complexity_judge",
                                system=PROMPTS.render("triage_system"), request=PROMPTS.render("triage", question=q),
                                model=Triage, step="triage.complexity")
        facts: dict[str, Any] = {"method": "mdagents"}
        if isinstance(triage, Triage):
            level, facts["route_from"] = triage.complexity, "triage"
        else:
            level, facts["route_from"] = settings.invalid_route, "invalid_triage"
            session.record(TranscriptEvent(kind="note", role="pipeline", agent="mdagents", step="triage.invalid",
                                           content=f"Invalid complexity reply; routed to {level}."))
        facts["complexity"] = level
        session.record(TranscriptEvent(kind="note", role="pipeline", agent="mdagents", step="triage.route",
                                       content=level, data={"route": level, "from": facts["route_from"]}))
        if level == "low":
            answer = await self._solo(question, q, session, settings, facts)
        elif level == "moderate":
            answer = await self._mdt(question, q, session, settings, facts)
        else:
            answer = await self._ict(question, q, session, settings, facts)
        record_final(session, "mdagents", answer, route=level, rule=facts.get("rule"))
        return Outcome(answer=answer, invalid=not answer, summary=MDAgentsSummary.model_validate(facts))

    async def _solo(self, question: Question, q: str, session: QuestionSession, settings: MDAgentsSettings,
                    facts: dict[str, Any]) -> tuple[str, ...]:
        system = PROMPTS.render("solo_system")
        examples = draw_exemplars(question, settings)
        if not examples:
            session.record(TranscriptEvent(kind="note", role="pipeline", agent="mdagents", step="solo.no_exemplars",
                                           content="No exemplar_file (or exemplars: 0): the expert answers "
                                                   "without solved examples."))
        shown = []
        for i, ex in enumerate(examples, 1):
            ex_q = Question(dataset="exemplar", qid=str(i), text=ex["question"], options=ex["options"],
                            gold=(ex["answer_idx"],))
            letter = ex["answer_idx"]
            parsed = await ask_once(session, role="solo_expert", name="solo_expert", system=system,
                                    request=PROMPTS.render("rationale", question=format_question(ex_q), letter=letter,
                                                           text=ex["options"][letter]),
                                    model=Rationale, step="solo.rationale", turn=i)
            why = parsed.rationale if isinstance(parsed, Rationale) else ""
            shown.append(f"{format_question(ex_q)}\nAnswer: ({letter}) {ex['options'][letter]}. {why}".strip())
        facts["exemplars"] = [ex["question"][:80] for ex in examples]
        request = PROMPTS.render("solo", question=q, examples="\n\n".join(shown)) if shown else q
        final = await ask_once(session, role="solo_expert", name="solo_expert", system=system, request=request,
                               model=answer_model(question.letters, multi=question.multi_answer),
                               step="solo.answer")
        facts["rule"] = "solo"
        return letters_of(final) if final is not None else ()

    async def _mdt(self, question: Question, q: str, session: QuestionSession, settings: MDAgentsSettings,
                   facts: dict[str, Any]) -> tuple[str, ...]:
        n = settings.mdt_experts
        recruit = await ask_once(session, role="recruiter", name="recruiter", system=PROMPTS.render("recruiter_system"),
                                 request=PROMPTS.render("mdt_recruit", question=q, n=n),
                                 model=roles.recruit_model(n), step="mdt.recruit")
        specialties = ([str(getattr(recruit, f"expert_{i}")) for i in range(1, n + 1)] if recruit is not None
                       else ["general medicine"] * n)
        lead = int(recruit.lead) if recruit is not None else 1  # type: ignore[attr-defined]
        names = [f"expert_{i}" for i in range(1, n + 1)]
        lead_role = specialties[lead - 1]
        experts: dict[str, RoleAgent] = {}
        for i, (name, role) in enumerate(zip(names, specialties, strict=True), 1):
            position = "You lead the team." if i == lead else f"You report to the team lead, the {lead_role}."
            experts[name] = RoleAgent(session, name=name, role="mdt_expert",
                                      system_message=PROMPTS.render("mdt_expert", role=role, position=position))
        facts.update(experts=specialties, lead=names[lead - 1])
        session.record(TranscriptEvent(kind="note", role="pipeline", agent="mdagents", step="mdt.hierarchy",
                                       content=f"{names[lead - 1]} ({lead_role}) leads; the others report to it.",
                                       data={"lead": names[lead - 1], "experts": dict(zip(names, specialties,
                                                                                          strict=True))}))
        a_type = answer_model(question.letters, multi=question.multi_answer)
        answers: dict[str, str | None] = {}
        texts: dict[str, str] = {}

        async def answer_all(step: str, content: str, round: int) -> None:
            for name, agent in experts.items():
                parsed = await agent.speak(content, a_type, step=step, round=round)
                answers[name] = answer_key(parsed)
                texts[name] = str(getattr(parsed, "reasoning", "")) if parsed is not None else ""

        await answer_all("mdt.initial", PROMPTS.render("initial", question=q), 0)
        messages, rounds_run = 0, 0
        consensus = unanimous(answers)
        assistant_system = PROMPTS.render("assistant_system")
        while not consensus and rounds_run < settings.rounds:
            rounds_run += 1
            r = rounds_run
            summ = await ask_once(session, role="assistant", name="assistant", system=assistant_system,
                                  request=PROMPTS.render("summarise", question=q,
                                                         opinions=opinions_block(answers, texts)),
                                  model=roles.summary_model(), step="mdt.summary", round=r)
            summary = (f"Key knowledge: {summ.key_knowledge}\nTotal analysis: {summ.total_analysis}"  # type: ignore[attr-defined]
                       if summ is not None else "(no valid summary)")
            for t in range(1, settings.turns + 1):
                sent = 0
                for name, agent in experts.items():
                    others = [o for o in names if o != name]
                    msg = await agent.speak(PROMPTS.render("talk", round=r, turn=t, summary=summary,
                                                           opinions=opinions_block(answers, texts)),
                                            roles.talk_model(others), step="mdt.talk", round=r, turn=t)
                    if msg is None or not msg.talk or not str(msg.message).strip():  # type: ignore[attr-defined]
                        continue
                    to = others if msg.to == "everyone" else [str(msg.to)]  # type: ignore[attr-defined]
                    for target in to:
                        await experts[target].hear(f"Message from {name} ({specialties[names.index(name)]}): "
                                                   f"{msg.message}", source=name)  # type: ignore[attr-defined]
                    session.record(TranscriptEvent(kind="note", role="mdt_expert", agent=name, step="mdt.message",
                                                   round=r, turn=t, content=str(msg.message),  # type: ignore[attr-defined]
                                                   data={"from": name, "to": to}))
                    sent += 1
                messages += sent
                if sent == 0:  # nobody wants to talk: the round's turns end
                    break
            await answer_all("mdt.round_answer", PROMPTS.render("round_answer", round=r), r)
            consensus = unanimous(answers)
        facts.update(rounds_run=rounds_run, messages=messages, consensus=consensus)
        final, decided = await moderate(session, question, system=PROMPTS.render("moderator_system"),
                                        request=PROMPTS.render("moderate", question=q,
                                                               opinions=opinions_block(answers, texts)),
                                        answers=answers, method="mdagents")
        facts["rule"] = decided["rule"]
        return final

    async def _ict(self, question: Question, q: str, session: QuestionSession, settings: MDAgentsSettings,
                   facts: dict[str, Any]) -> tuple[str, ...]:
        g_n, m_n = settings.ict_groups, settings.ict_members
        recruit = await ask_once(session, role="recruiter", name="recruiter", system=PROMPTS.render("recruiter_system"),
                                 request=PROMPTS.render("ict_recruit", question=q, groups=g_n, members=m_n),
                                 model=roles.ict_model(g_n, m_n), step="ict.recruit")
        teams: list[dict[str, Any]] = []
        reports: list[str] = []
        for g in range(1, g_n + 1):
            team = (str(getattr(recruit, f"team_{g}_name")) or f"team {g}") if recruit else f"team {g}"
            members = ([str(getattr(recruit, f"team_{g}_member_{m}")) for m in range(1, m_n + 1)] if recruit
                       else ["general medicine"] * m_n)
            lead = RoleAgent(session, name=f"team_{g}_lead", role="ict_lead",
                             system_message=PROMPTS.render("ict_member", role=members[0], team=team))
            earlier = ("\nEarlier teams' reports:\n" + "\n".join(reports) + "\n") if reports else ""
            plan_reply = await lead.speak(PROMPTS.render("lead_plan", question=q, earlier=earlier, team=team), Text,
                                          step="ict.plan", round=g)
            plan = plan_reply.text if isinstance(plan_reply, Text) else "(no valid plan)"
            findings = []
            for m, role in enumerate(members[1:], 2):
                found = await ask_once(session, role="ict_member", name=f"team_{g}_member_{m}",
                                       system=PROMPTS.render("ict_member", role=role, team=team),
                                       request=PROMPTS.render("investigate", question=q, plan=plan),
                                       model=Text, step="ict.investigate", round=g, turn=m)
                findings.append(f"- {role}: {found.text if isinstance(found, Text) else '(no valid report)'}")
            rep = await lead.speak(PROMPTS.render("team_report", findings="\n".join(findings)), Text,
                                   step="ict.report", round=g)
            reports.append(f"[{team}] {rep.text if isinstance(rep, Text) else '(no valid report)'}")
            teams.append({"team": team, "members": members})
        facts["teams"] = teams
        final = await ask_once(session, role="decision_maker", name="decision_maker",
                               system=PROMPTS.render("decider_system"),
                               request=PROMPTS.render("decide", question=q, reports="\n".join(reports)),
                               model=answer_model(question.letters, multi=question.multi_answer),
                               step="decision.answer")
        facts["rule"] = "decision_maker"
        return letters_of(final) if final is not None else ()

