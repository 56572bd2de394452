"""MDAgents (Kim et al., "MDAgents: An Adaptive Collaboration of LLMs for Medical Decision-Making",
NeurIPS 2024), re-implemented from the behaviour of MedAgentsBench's copy (`baselines/MDAgents/
utils.py`, the code behind the benchmark's logged numbers) and, as the `original` variant, of the
paper's repository (mitmedialab/MDAgents has no licence: read for behaviour, nothing is copied).
The page `docs/methods/mdagents.md` lists what follows which code and what differs.

| stage      | what happens                                                                           |
|------------|----------------------------------------------------------------------------------------|
| `triage`   | one call rates the question low / moderate / high (invalid: `invalid_route`, low)      |
| `solo`     | low: one agent writes a rationale for each of `exemplars` (5) solved examples from     |
|            | `exemplar_file` (`builtin`; never the question itself), then one expert answers        |
| `mdt`      | moderate: the recruiter seats `mdt_experts` (5) with a lead, then writes the rationales |
|            | of the exemplars; each expert answers once with the exemplars in its prompt            |
| `debate`   | up to `rounds` (5) rounds: a fresh assistant summarises the round's reports (nobody    |
|            | reads the summary), then up to `turns` (5) turns of talk / choose / message calls      |
|            | (`multiagent_debate`). A turn in which nobody wants to talk ends the whole discussion  |
| `mdt`      | every expert gives its final answer once (`original`: after every round that did not   |
|            | end in silence, and a discussion that ends silent in round 1 collects none)            |
| `ict`      | high: the recruiter forms `ict_groups` (3) teams of `ict_members` (3); the Initial     |
|            | Assessment Team (the first), then the others, then the Final Review team again, each   |
|            | on its own: the lead plans, each member investigates, the lead answers                 |
| `decision` | mdt: the moderator decides by majority over the final answers (any option, as its      |
|            | code's free reply; an invalid reply falls back to the coded majority); ict: the        |
|            | decision maker answers from the Initial Assessment Team's report only; solo: final     |

Calls per question (re-asks not counted), with x exemplars, E experts, R rounds, T turns: low
2 + x; moderate at least 4 + x + 3E (nobody talks in the first turn: 24 with 5 exemplars, 19 without)
and at most 2 + x + E + R(1 + T(2E + E*E)) + E + 1 when every expert writes to every expert
(itself included, as the codes allow) every turn (898 with 5 exemplars, 893 without); high
3 + 4 * (groups + 1) (19).
MedAgentsBench's code adds one answer-parser call per question on every route.

Temperature: both codes send none on `Agent.chat` (the provider's default) and 0 on the three
`temp_responses` calls; `chat_agent` sends none, and the solo answer, the moderator and the ICT
decision send the model block's (0 by default).
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import FREE_REASONING, letters_of
from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings
from medpanel.agents.pipelines.multiagent_common import (
    PROVIDER_TEMPERATURE,
    answer_key,
    ask_once,
    method_answer,
    moderate,
    opinions_block,
    record_final,
    sampled,
)
from medpanel.agents.pipelines.multiagent_debate import Member, TurnLog, talk_turn
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.prompting import format_question
from medpanel.agents.roles.exemplars import BUILTIN, ExemplarPool
from medpanel.agents.summary import Fact, Summary
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.methods.mdagents.roles import mdagents as roles
from medpanel.methods.mdagents.roles.mdagents import PROMPTS, Complexity, Rationale, Text, Triage

ORIGINAL = "original"
"""The variant that follows mitmedialab/MDAgents where it differs from MedAgentsBench's copy."""


class MDAgentsSettings(PipelineSettings):
    rounds: int = Field(default=5, ge=1, le=10)
    """MDT discussion rounds (both codes' 5; the seed paper's own MDT uses 3)."""
    turns: int = Field(default=5, ge=1, le=10)
    """Turns per round (both codes' 5)."""
    mdt_experts: int = Field(default=5, ge=2, le=10)
    """Experts the recruiter seats in the moderate route's MDT (one of them the lead)."""
    ict_groups: int = Field(default=3, ge=2, le=6)
    """Teams of the high route's ICT."""
    ict_members: int = Field(default=3, ge=2, le=6)
    """Clinicians per ICT team (a lead and its members)."""
    exemplars: int = Field(default=5, ge=0, le=20)
    """Solved examples for the low and moderate routes (both codes' 5 from the training split)."""
    exemplar_file: str | None = BUILTIN
    """Where the solved examples come from: `builtin` (the team's six, `roles/exemplars.py`), a
    JSONL of solved questions (MedAgentsBench shape: question, options, answer_idx) from a split that
    is not evaluated (the codes use the dataset's `train.jsonl`), or None: no examples (recorded)."""
    invalid_route: Complexity = "low"
    """Where an invalid triage reply goes (both codes default to their basic route)."""

    @field_validator("exemplar_file")
    @classmethod
    def _exists(cls, v: str | None) -> str | None:
        if v in (None, BUILTIN):
            return v
        if not Path(v).is_file():
            raise ValueError(f"no file {v!r}: give a JSONL of solved questions outside the evaluated split")
        if Path(v).name.lower().startswith("test"):
            raise ValueError(f"{v!r} looks like a test split: exemplars must come from a split that is not evaluated")
        return v


class Team(Fact):
    """An ICT team the recruiter formed: its name and its members' specialties, lead first."""

    team: str
    members: list[str]


class MDAgentsSummary(Summary):
    method: str | None = None
    variant: str | None = None
    complexity: str | None = None
    route_from: str | None = None
    exemplars: list[str] | None = None
    experts: list[str] | None = None
    lead: str | None = None
    rounds_run: int | None = None
    turns_run: int | None = None
    messages: int | None = None
    ended_by: str | None = None
    teams: list[Team] | None = None
    rule: str | None = None


@functools.lru_cache(maxsize=8)
def _pool(source: str) -> ExemplarPool:
    return ExemplarPool(source)


def draw_exemplars(question: Question, settings: MDAgentsSettings) -> list[dict[str, Any]]:
    """`exemplars` solved examples from the pool, seeded by the question's key; an item with the
    question's own stem is never drawn (`ExemplarPool.allowed`)."""
    if settings.exemplar_file is None or settings.exemplars == 0:
        return []
    pool, _ = _pool(settings.exemplar_file).allowed(question)
    drawn = random.Random(f"mdagents/{question.key}").sample(pool, min(settings.exemplars, len(pool)))
    return [{"question": e.question, "options": e.options, "answer_idx": e.answer} for e in drawn]


def chat_agent(session: QuestionSession, *, name: str, role: str, system: str) -> RoleAgent:
    """An agent whose every call sends no temperature, as both codes' `Agent.chat` (the provider's
    default). Only the three `temp_responses` calls (the solo answer, the moderator, the ICT
    decision) send one: 0 in the codes, the model block's temperature here."""
    return sampled(RoleAgent(session, name=name, role=role, system_message=system), PROVIDER_TEMPERATURE)


def _note(session: QuestionSession, step: str, content: str, **data: Any) -> None:
    session.record(TranscriptEvent(kind="note", role="pipeline", agent="mdagents", step=step, content=content,
                                   data=data))


async def solved_examples(session: QuestionSession, writer: RoleAgent, examples: list[dict[str, Any]], *,
                          prompt: str, step: str) -> list[str]:
    """Each example with the rationale `writer` gives for its answer. One agent writes them all, so
    each rationale call carries the earlier ones in its history (as both codes run it)."""
    shown = []
    for i, ex in enumerate(examples, 1):
        ex_q = Question(dataset="exemplar", qid=str(i), text=ex["question"], options=ex["options"],
                        gold=(ex["answer_idx"],))
        letter = ex["answer_idx"]
        parsed = await writer.speak(PROMPTS.render(prompt, question=format_question(ex_q), letter=letter,
                                                   text=ex["options"][letter]), Rationale, step=step, turn=i)
        why = parsed.rationale if parsed is not None else ""
        answer = f"Answer: ({letter}) {ex['options'][letter]}"
        shown.append(f"[Example {i}]\n{format_question(ex_q)}\n{answer}\n{why}".strip())
    return shown


class MDAgentsPipeline(Pipeline[MDAgentsSettings, ConditionPlan]):
    settings_model = MDAgentsSettings
    summary_model = MDAgentsSummary
    variants = (ORIGINAL,)

    async def __call__(self, question: Question, plan: ConditionPlan, session: QuestionSession,
                       settings: MDAgentsSettings) -> Outcome:
        q = format_question(question)
        original = plan.variant == ORIGINAL
        triage = await ask_once(session, role="triage", name="complexity_judge",
                                system=PROMPTS.render("triage_system"), request=PROMPTS.render("triage", question=q),
                                model=Triage, step="triage.complexity", sampling=PROVIDER_TEMPERATURE)
        facts = MDAgentsSummary(method="mdagents", variant=ORIGINAL if original else "benchmark")
        if triage is not None:
            level, facts.route_from = triage.complexity, "triage"
        else:
            level, facts.route_from = settings.invalid_route, "invalid_triage"
            _note(session, "triage.invalid", f"Invalid complexity reply; routed to {level}.")
        facts.complexity = level
        _note(session, "triage.route", level, route=level, **{"from": facts.route_from})
        if level == "low":
            answer = await self._solo(question, q, session, settings, facts)
        elif level == "moderate":
            answer = await self._mdt(question, q, session, settings, facts, original)
        else:
            answer = await self._ict(question, q, session, settings, facts)
        record_final(session, "mdagents", answer, route=level, rule=facts.rule)
        return Outcome(answer=answer, invalid=not answer, summary=facts)

    def _examples(self, question: Question, session: QuestionSession, settings: MDAgentsSettings,
                  facts: MDAgentsSummary) -> list[dict[str, Any]]:
        examples = draw_exemplars(question, settings)
        if not examples:
            _note(session, "exemplars.none", "exemplar_file: null (or exemplars: 0): the experts answer "
                                             "without solved examples.")
        facts.exemplars = [ex["question"][:80] for ex in examples]
        return examples

    async def _solo(self, question: Question, q: str, session: QuestionSession, settings: MDAgentsSettings,
                    facts: MDAgentsSummary) -> tuple[str, ...]:
        system = PROMPTS.render("solo_system")
        writer = chat_agent(session, name="medical_agent", role="solo_expert", system=system)
        shown = await solved_examples(session, writer, self._examples(question, session, settings, facts),
                                      prompt="rationale", step="solo.rationale")
        request = PROMPTS.render("solo", question=q, examples="\n\n".join(shown)) if shown else q
        # The code's `temp_responses`: the model block's temperature (the code's 0), its "think step by step".
        final = await ask_once(session, role="solo_expert", name="solo_expert", system=system, request=request,
                               model=method_answer(question, reasoning=FREE_REASONING), step="solo.answer")
        facts.rule = "solo"
        return letters_of(final) if final is not None else ()

    async def _mdt(self, question: Question, q: str, session: QuestionSession, settings: MDAgentsSettings,
                   facts: MDAgentsSummary, original: bool) -> tuple[str, ...]:
        n = settings.mdt_experts
        recruiter = chat_agent(session, name="recruiter", role="recruiter", system=PROMPTS.render("recruiter_system"))
        recruit = await recruiter.speak(PROMPTS.render("mdt_recruit", question=q, n=n), roles.recruit_model(n),
                                        step="mdt.recruit")
        specialties = recruit.slots if recruit is not None else ["general medicine"] * n
        lead = recruit.lead if recruit is not None else 1
        names = [f"expert_{i}" for i in range(1, n + 1)]
        lead_role = specialties[lead - 1]
        members: list[Member] = []
        for name, role in zip(names, specialties, strict=True):
            # The hierarchy reaches no expert: both codes only print it as a tree.
            members.append(Member(name, role, chat_agent(session, name=name, role="mdt_expert",
                                                         system=PROMPTS.render("mdt_expert", role=role))))
        facts.experts, facts.lead = specialties, names[lead - 1]
        _note(session, "mdt.hierarchy", f"{names[lead - 1]} ({lead_role}) leads (recorded; no expert is told).",
              lead=names[lead - 1], experts=dict(zip(names, specialties, strict=True)))
        # The recruiter writes the exemplars' rationales, in its own history (both codes).
        shown = await solved_examples(session, recruiter, self._examples(question, session, settings, facts),
                                      prompt="mdt_rationale", step="mdt.rationale")
        examples = ("Solved examples:\n" + "\n\n".join(shown) + "\n\n") if shown else ""
        a_type = method_answer(question)
        first: dict[str, str | None] = {}
        texts: dict[str, str] = {}
        for m in members:
            parsed = await m.agent.speak(PROMPTS.render("initial", examples=examples, question=q), a_type,
                                         step="mdt.initial")
            first[m.name] = answer_key(parsed)
            texts[m.name] = f"({m.specialty}) {parsed.reasoning}" if parsed is not None else ""
        opinions = opinions_block(first, texts)
        final: dict[str, str | None] = {}
        final_texts: dict[str, str] = {}

        async def final_answers(r: int) -> None:
            for m in members:
                parsed = await m.agent.speak(PROMPTS.render("final", question=q), a_type, step="mdt.final", round=r)
                final[m.name] = answer_key(parsed)
                final_texts[m.name] = parsed.reasoning if parsed is not None else ""

        rounds_run = turns_run = messages = 0
        ended_by = "rounds"
        for r in range(1, settings.rounds + 1):
            rounds_run = r
            # A fresh assistant each round; only the first round has reports to summarise (the codes
            # fill the round's reports for round 1 only), and no expert is shown the summary.
            await ask_once(session, role="assistant", name="assistant", system=PROMPTS.render("assistant_system"),
                           request=PROMPTS.render("summarise", opinions=opinions if r == 1 else "(no reports)"),
                           model=roles.TeamSummary, step="debate.summary", round=r, sampling=PROVIDER_TEMPERATURE)
            silent = False
            for t in range(1, settings.turns + 1):
                turns_run += 1
                log = TurnLog()

                def shown_to(m: Member, log: TurnLog = log, r: int = r) -> str:
                    # Round 1 shows the initial answers; later rounds the messages sent to it so far this turn.
                    return opinions if r == 1 else log.for_(m.name, members)

                await talk_turn(session, members, log, prompts=PROMPTS, shown=shown_to, method="mdagents",
                                round=r, turn=t)
                messages += sum(len(v) for v in log.inbox.values())
                if log.talked == 0:
                    silent = True
                    break
            if silent:
                ended_by = "silence"
                _note(session, "debate.end", f"Nobody wanted to talk in round {r}, turn {t}: the discussion ends.")
                break
            if original:
                await final_answers(r)
        if not original:
            await final_answers(rounds_run)
        elif not final:
            _note(session, "mdt.no_final_answers", "The discussion ended silent in its first round: no final "
                                                   "answers were collected (original), the moderator decides alone.")
        facts.rounds_run, facts.turns_run, facts.messages, facts.ended_by = rounds_run, turns_run, messages, ended_by
        shown_final = opinions_block(final, final_texts) if final else "(none)"
        decided_answer, decided = await moderate(session, question, system=PROMPTS.render("moderator_system"),
                                                 request=PROMPTS.render("moderate", question=q, opinions=shown_final),
                                                 answers=final, method="mdagents")
        facts.rule = decided["rule"]
        return decided_answer

    async def _ict(self, question: Question, q: str, session: QuestionSession, settings: MDAgentsSettings,
                   facts: MDAgentsSummary) -> tuple[str, ...]:
        g_n, m_n = settings.ict_groups, settings.ict_members
        recruit = await ask_once(session, role="recruiter", name="recruiter", system=PROMPTS.render("recruiter_system"),
                                 request=PROMPTS.render("ict_recruit", question=q, groups=g_n, members=m_n),
                                 model=roles.ict_model(g_n, m_n), step="ict.recruit", sampling=PROVIDER_TEMPERATURE)
        teams: list[Team] = []
        agents: list[tuple[str, list[str], list[RoleAgent]]] = []
        recruited = recruit.teams if recruit is not None else [("", ["general medicine"] * m_n) for _ in range(g_n)]
        for g, (name, specialties) in enumerate(recruited, 1):
            team = name or f"team {g}"
            seated = [chat_agent(session, name=f"team_{g}_{'lead' if m == 1 else f'member_{m}'}",
                                 role="ict_lead" if m == 1 else "ict_member",
                                 system=PROMPTS.render("ict_member", role=role, team=team))
                      for m, role in enumerate(specialties, 1)]
            agents.append((team, specialties, seated))
            teams.append(Team(team=team, members=specialties))

        async def work(g: int) -> str:
            """One team on its own (no team reads another's report); its agents keep their histories."""
            team, specialties, seated = agents[g - 1]
            lead = seated[0]
            plan_reply = await lead.speak(PROMPTS.render("lead_plan", question=q, team=team,
                                                         members=", ".join(specialties[1:])), Text,
                                          step="ict.plan", round=g)
            plan = plan_reply.text if plan_reply is not None else "(no valid plan)"
            findings = []
            for m, (role, member) in enumerate(zip(specialties[1:], seated[1:], strict=True), 2):
                found = await member.speak(PROMPTS.render("investigate", team=team, plan=plan), Text,
                                           step="ict.investigate", round=g, turn=m)
                findings.append(f"[{role}]\n{found.text if found is not None else '(no valid report)'}")
            rep = await lead.speak(PROMPTS.render("team_report", findings="\n".join(findings), question=q), Text,
                                   step="ict.report", round=g)
            return f"[{team}] {rep.text if rep is not None else '(no valid report)'}"

        initial = await work(1)
        for g in range(2, g_n + 1):
            await work(g)
        # MedAgentsBench's code runs the final review team twice (once among the other teams, once as
        # the review step); neither report reaches the decision, which reads the initial team's only.
        await work(g_n)
        facts.teams = teams
        final = await ask_once(session, role="decision_maker", name="decision_maker",
                               system=PROMPTS.render("decider_system"),
                               request=PROMPTS.render("decide", question=q, reports=initial),
                               model=method_answer(question), step="decision.answer")
        facts.rule = "decision_maker"
        return letters_of(final) if final is not None else ()
