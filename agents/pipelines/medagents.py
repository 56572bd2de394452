"""MedAgents (Tang et al., "MedAgents: Large Language Models as Collaborators for Zero-shot Medical
Reasoning", ACL Findings 2024), re-implemented from its described behaviour (gersteinlab/MedAgents has
no licence: nothing is copied).

Five stages, each call's step named `<stage>.<what>`:

| stage      | calls                                                                               |
|------------|-------------------------------------------------------------------------------------|
| `domains`  | one call names `question_domains` (5) specialties for the question, one names        |
|            | `option_domains` (2) for the options                                                |
| `analysis` | one question analysis per question domain; one option analysis per option domain,   |
|            | shown the question analyses                                                         |
| `report`   | the editor synthesizes one report (key knowledge, total analysis)                   |
| `vote`     | each question-domain expert votes yes/no on the report, with advice when no. Not    |
|            | unanimous and attempts left (`max_attempts`, 3): `report.revise` rewrites it with   |
|            | the advice, and the experts vote again                                              |
| `decision` | the decision maker answers from the last report (letter-constrained)                |

Consensus is every voter agreeing; an invalid vote is not agreement. After `max_attempts` votes
without consensus the last report stands (recorded). Calls per question: 2 + Q + O + 1 + a*Q + (a-1)
+ 1, for `a` attempts (16 with the defaults and consensus at the first vote), re-asks not counted.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model, letters_of
from medpanel.agents.pipelines.base import ConditionPlan, Outcome, Pipeline, PipelineSettings, Summary
from medpanel.agents.pipelines.multiagent_common import ask_once, numbered, numbered_model, record_final
from medpanel.agents.prompting import format_question
from medpanel.agents.roles import medagents as roles
from medpanel.agents.roles.medagents import PROMPTS, Analysis, Vote
from medpanel.agents.types import Question, TranscriptEvent


class MedAgentsSettings(PipelineSettings):
    question_domains: int = Field(default=5, ge=1, le=10)
    """Experts named for the question (the paper's 5)."""
    option_domains: int = Field(default=2, ge=1, le=10)
    """Experts named for the options (the paper's 2)."""
    max_attempts: int = Field(default=3, ge=1, le=10)
    """Votes on the report before the last revision stands (the original's `max_attempt_vote` 3)."""


class MedAgentsSummary(Summary):
    method: str | None = None
    question_domains: list[str] | None = None
    option_domains: list[str] | None = None
    attempts: int | None = None
    consensus: bool | None = None
    votes: list[dict[str, Any]] | None = None


class MedAgentsPipeline(Pipeline[MedAgentsSettings, ConditionPlan]):
    settings_model = MedAgentsSettings
    summary_model = MedAgentsSummary

    async def __call__(self, question: Question, plan: ConditionPlan, session: QuestionSession,
                       settings: MedAgentsSettings) -> Outcome:
        q = format_question(question)
        system = PROMPTS.render("classifier")
        qdomains = await self._domains(session, q, system, "question", settings.question_domains)
        odomains = await self._domains(session, q, system, "option", settings.option_domains)

        analyses: list[str] = []
        for i, domain in enumerate(qdomains, 1):
            parsed = await ask_once(session, role="question_analyst", name=f"question_expert_{i}",
                                    system=PROMPTS.render("expert", domain=domain),
                                    request=PROMPTS.render("question_analysis", question=q, domain=domain),
                                    model=Analysis, step="analysis.question", turn=i)
            analyses.append(f"[{domain}] {parsed.analysis if parsed else '(no valid analysis)'}")  # type: ignore[attr-defined]
        question_block = "\n".join(analyses)
        for i, domain in enumerate(odomains, 1):
            parsed = await ask_once(session, role="option_analyst", name=f"option_expert_{i}",
                                    system=PROMPTS.render("expert", domain=domain),
                                    request=PROMPTS.render("option_analysis", question=q, domain=domain,
                                                           analyses=question_block),
                                    model=Analysis, step="analysis.option", turn=i)
            analyses.append(f"[{domain}, options] {parsed.analysis if parsed else '(no valid analysis)'}")  # type: ignore[attr-defined]

        report_type = roles.report_model()
        editor = PROMPTS.render("editor")
        parsed_report = await ask_once(session, role="synthesizer", name="editor", system=editor,
                                       request=PROMPTS.render("synthesize", question=q, analyses="\n".join(analyses)),
                                       model=report_type, step="report.synthesize")
        report = roles.report_text(parsed_report) if parsed_report else "(no valid report)"

        votes: list[dict[str, Any]] = []
        consensus = False
        attempt = 0
        while attempt < settings.max_attempts:
            attempt += 1
            ballot: list[dict[str, Any]] = []
            for i, domain in enumerate(qdomains, 1):
                v = await ask_once(session, role="domain_expert", name=f"question_expert_{i}",
                                   system=PROMPTS.render("expert", domain=domain),
                                   request=PROMPTS.render("vote", question=q, domain=domain, report=report),
                                   model=Vote, step="vote.expert", round=attempt, turn=i)
                ballot.append({"domain": domain, "agree": v.agree if isinstance(v, Vote) else None,
                               "advice": v.advice if isinstance(v, Vote) else None})
            consensus = all(b["agree"] is True for b in ballot)
            votes.append({"attempt": attempt, "ballot": ballot, "consensus": consensus})
            session.record(TranscriptEvent(kind="vote", role="pipeline", agent="medagents", step="vote.consensus",
                                           round=attempt, content="consensus" if consensus else "no consensus",
                                           data={"yes": sum(b["agree"] is True for b in ballot),
                                                 "no": sum(b["agree"] is False for b in ballot),
                                                 "invalid": sum(b["agree"] is None for b in ballot),
                                                 "consensus": consensus}))
            if consensus or attempt == settings.max_attempts:
                break
            advice = "\n".join(f"- [{b['domain']}] {b['advice'] or '(no valid vote)'}"
                               for b in ballot if b["agree"] is not True)
            revised = await ask_once(session, role="synthesizer", name="editor", system=editor,
                                     request=PROMPTS.render("revise", question=q, report=report, advice=advice),
                                     model=report_type, step="report.revise", round=attempt)
            if revised is not None:
                report = roles.report_text(revised)
        if not consensus:
            session.record(TranscriptEvent(kind="note", role="pipeline", agent="medagents", step="vote.no_consensus",
                                           content=f"No consensus after {attempt} vote(s); the last report stands."))

        final = await ask_once(session, role="decision_maker", name="decision_maker", system=PROMPTS.render("decider"),
                               request=PROMPTS.render("decide", question=q, report=report),
                               model=answer_model(question.letters, multi=question.multi_answer),
                               step="decision.answer")
        answer = letters_of(final) if final is not None else ()
        record_final(session, "medagents", answer, attempts=attempt, consensus=consensus)
        summary = MedAgentsSummary.model_validate({
            "method": "medagents", "question_domains": qdomains, "option_domains": odomains,
            "attempts": attempt, "consensus": consensus, "votes": votes})
        return Outcome(answer=answer, invalid=not answer, summary=summary)

    async def _domains(self, session: QuestionSession, q: str, system: str, kind: str, n: int) -> list[str]:
        model = numbered_model(f"{kind.title()}Domains", "domain", n, "One medical specialty.")
        parsed = await ask_once(session, role="domain_classifier", name=f"{kind}_classifier", system=system,
                                request=PROMPTS.render(f"{kind}_domains", question=q, n=n), model=model,
                                step=f"domains.{kind}")
        if parsed is not None:
            return numbered(parsed, "domain", n)
        # Without named domains the stage still seats n experts, so the call count stays the paper's.
        session.record(TranscriptEvent(kind="note", role="pipeline", agent="medagents", step=f"domains.{kind}_invalid",
                                       content=f"The {kind} domains reply was invalid; {n} general-medicine experts "
                                               "take their place."))
        return ["general medicine"] * n
