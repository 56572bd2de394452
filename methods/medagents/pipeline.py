"""MedAgents (Tang et al., "MedAgents: Large Language Models as Collaborators for Zero-shot Medical
Reasoning", ACL Findings 2024), re-implemented from the behaviour of MedAgentsBench's copy
(`baselines/MedAgents/utils.py`, `prompt_utils.py`, `data_utils.py`: the code behind the
benchmark's logged numbers) and, as the `original` variant, of gersteinlab/MedAgents, which has no
licence: both read for behaviour, nothing is copied. `docs/methods/medagents.md` lists the
differences.

Five stages, each call's step named `<stage>.<what>`:

| stage      | calls                                                                               |
|------------|-------------------------------------------------------------------------------------|
| `domains`  | one call names `question_domains` (5) subfields from the stem alone, one names        |
|            | `option_domains` (2) from the stem and the options                                  |
| `analysis` | one question analysis per question domain (the stem alone); one option analysis per |
|            | option domain (stem, options and the question analyses)                             |
| `report`   | the editor synthesizes one report                                                   |
| `vote`     | every domain expert (question and option domains: 7) votes yes / no on the report;  |
|            | each "no" is followed by that expert's advice call. Any "no": `report.revise`       |
|            | rewrites the report with the advice, and while attempts are left (`max_attempts`,   |
|            | 3) the experts vote again on it. An unparseable vote counts as yes (the codes'      |
|            | rule), recorded                                                                     |
| `decision` | the decision maker answers from the latest report: the letter alone, constrained    |

Calls per question, re-asks not counted, with Q + O = D domain experts and a attempts: 2 + D + 1 +
a*D + (no votes) + (failed votes) + 1. With the defaults: 18 when the first vote is unanimous, 56
at most (every vote "no" three times: 3 x (7 + 7 + 1)). The `original` variant caps each stage's
reply as gersteinlab/MedAgents does (`ORIGINAL_MAX_TOKENS`); MedAgentsBench's copy sets no cap.
"""

from __future__ import annotations

from pydantic import Field

from medpanel.agents import events
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import letters_of
from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings
from medpanel.agents.pipelines.multiagent_common import ask_once, labelled, method_answer, numbered_model, record_final
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.prompting import format_question
from medpanel.agents.summary import Fact, Summary
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.methods.medagents.roles import medagents as roles
from medpanel.methods.medagents.roles.medagents import PROMPTS, Advice, Analysis, Revised, Vote

ORIGINAL = "original"
ORIGINAL_MAX_TOKENS: dict[str, int] = {
    # gersteinlab/MedAgents `utils.py: fully_decode`, per call (MedAgentsBench's copy removed them all)
    "domains": 50, "analysis": 300, "report": 2500, "vote": 30, "advice": 500, "revise": 2500, "decision": 2500}


class MedAgentsSettings(PipelineSettings):
    question_domains: int = Field(default=5, ge=1, le=10)
    """Experts named for the question (the codes' 5)."""
    option_domains: int = Field(default=2, ge=1, le=10)
    """Experts named for the options (the codes' 2)."""
    max_attempts: int = Field(default=3, ge=1, le=10)
    """Votes on the report, each failed one followed by a revision (the codes' `max_attempt_vote` 3)."""


class Ballot(Fact):
    """One domain expert's vote on the report; its advice when it disagreed."""

    domain: str
    agree: bool
    unparsed: bool
    """The reply had no yes or no (the codes read it as yes)."""
    advice: str | None = None


class VoteRound(Fact):
    """One attempt at consensus: every expert's ballot."""

    attempt: int
    ballot: list[Ballot]
    consensus: bool


class MedAgentsSummary(Summary):
    method: str | None = None
    variant: str | None = None
    question_domains: list[str] | None = None
    option_domains: list[str] | None = None
    attempts: int | None = None
    revisions: int | None = None
    consensus: bool | None = None
    votes: list[VoteRound] | None = None


def stem_of(question: Question) -> str:
    """The question without its options (what the codes' question classifier and analysts read)."""
    return f"Question:\n{question.text}"


def options_of(question: Question) -> str:
    return "\n".join(f"({k}) {v}" for k, v in question.options.items())


class MedAgentsPipeline(Pipeline[MedAgentsSettings, ConditionPlan]):
    settings_model = MedAgentsSettings
    summary_model = MedAgentsSummary
    variants = (ORIGINAL,)

    async def __call__(self, question: Question, plan: ConditionPlan, session: QuestionSession,
                       settings: MedAgentsSettings) -> Outcome:
        original = plan.variant == ORIGINAL

        def cap(stage: str) -> int | None:
            return ORIGINAL_MAX_TOKENS[stage] if original else None

        q, stem, opts = format_question(question), stem_of(question), options_of(question)
        system = PROMPTS.render("classifier")
        qdomains = await self._domains(session, stem, system, "question", settings.question_domains, cap("domains"))
        odomains = await self._domains(session, q, system, "option", settings.option_domains, cap("domains"))

        analyses: list[str] = []
        for i, domain in enumerate(qdomains, 1):
            parsed = await ask_once(session, role="question_analyst", name=f"question_expert_{i}",
                                    system=PROMPTS.render("expert", domain=domain),
                                    request=PROMPTS.render("question_analysis", question=stem, domain=domain),
                                    model=Analysis, step="analysis.question", turn=i, max_tokens=cap("analysis"))
            analyses.append(f"[{domain}] {parsed.analysis if parsed else '(no valid analysis)'}")
        question_block = "\n".join(analyses)
        for i, domain in enumerate(odomains, 1):
            parsed = await ask_once(session, role="option_analyst", name=f"option_expert_{i}",
                                    system=PROMPTS.render("expert", domain=domain),
                                    request=PROMPTS.render("option_analysis", question=q, domain=domain,
                                                           analyses=question_block),
                                    model=Analysis, step="analysis.option", turn=i, max_tokens=cap("analysis"))
            analyses.append(f"[{domain}, options] {parsed.analysis if parsed else '(no valid analysis)'}")

        editor = PROMPTS.render("editor")
        parsed_report = await ask_once(session, role="synthesizer", name="editor", system=editor,
                                       request=PROMPTS.render("synthesize", question=q, analyses="\n".join(analyses)),
                                       model=roles.Report, step="report.synthesize", max_tokens=cap("report"))
        analysis = parsed_report.total_analysis if parsed_report else "(no valid report)"
        report = roles.report_text(stem, opts, analysis)

        voters = [(f"question_expert_{i}", d) for i, d in enumerate(qdomains, 1)]
        voters += [(f"option_expert_{i}", d) for i, d in enumerate(odomains, 1)]
        votes: list[VoteRound] = []
        consensus, attempt, revisions = False, 0, 0
        while attempt < settings.max_attempts and not consensus:
            attempt += 1
            ballot: list[Ballot] = []
            for turn, (name, domain) in enumerate(voters, 1):
                voter = PROMPTS.render("expert", domain=domain)
                v = await ask_once(session, role="domain_expert", name=name, system=voter,
                                   request=PROMPTS.render("vote", domain=domain, report=report), model=Vote,
                                   step="vote.expert", round=attempt, turn=turn, max_tokens=cap("vote"))
                # The codes read a vote with no yes or no in it as yes; counted here as `unparsed`.
                agree = v.agree if v is not None else True
                entry = Ballot(domain=domain, agree=agree, unparsed=v is None)
                if not agree:
                    a = await ask_once(session, role="domain_expert", name=name, system=voter,
                                       request=PROMPTS.render("advice", domain=domain, report=report), model=Advice,
                                       step="vote.advice", round=attempt, turn=turn, max_tokens=cap("advice"))
                    entry.advice = a.revisions if a is not None else "(no valid advice)"
                ballot.append(entry)
            consensus = all(b.agree for b in ballot)
            votes.append(VoteRound(attempt=attempt, ballot=ballot, consensus=consensus))
            session.record(TranscriptEvent(kind="vote", role="pipeline", agent="medagents", step="vote.consensus",
                                           round=attempt, content="consensus" if consensus else "no consensus",
                                           data={"yes": sum(b.agree for b in ballot),
                                                 "no": sum(not b.agree for b in ballot),
                                                 "unparsed_as_yes": sum(b.unparsed for b in ballot),
                                                 "consensus": consensus}, act=events.Vote()))
            if consensus:
                break
            # Every failed vote is followed by a revision, the last one included: the decision reads it.
            advice = "\n".join(f"- [{b.domain}] {b.advice}" for b in ballot if not b.agree)
            revised = await ask_once(session, role="synthesizer", name="editor", system=editor,
                                     request=PROMPTS.render("revise", report=report, advice=advice), model=Revised,
                                     step="report.revise", round=attempt, max_tokens=cap("revise"))
            revisions += 1
            if revised is not None:
                report = roles.report_text(stem, opts, revised.total_analysis)
        if not consensus:
            session.record(TranscriptEvent(kind="note", role="pipeline", agent="medagents", step="vote.no_consensus",
                                           content=f"No consensus after {attempt} vote(s); the decision reads the "
                                                   f"report of the last revision."))

        # Both codes ask for the chosen option's letter and nothing else.
        final = await ask_once(session, role="decision_maker", name="decision_maker", system=PROMPTS.render("decider"),
                               request=PROMPTS.render("decide", report=report),
                               model=method_answer(question, reasoning=None), step="decision.answer",
                               max_tokens=cap("decision"))
        answer = letters_of(final) if final is not None else ()
        record_final(session, "medagents", answer, attempts=attempt, consensus=consensus)
        summary = MedAgentsSummary(
            method="medagents", variant=ORIGINAL if original else "benchmark", question_domains=qdomains,
            option_domains=odomains, attempts=attempt, revisions=revisions, consensus=consensus, votes=votes)
        return Outcome(answer=answer, invalid=not answer, summary=summary)

    async def _domains(self, session: QuestionSession, shown: str, system: str, kind: str, n: int,
                       max_tokens: int | None) -> list[str]:
        model = numbered_model(f"{kind.title()}Domains", "domain", n, "One medical specialty.")
        parsed = await ask_once(session, role="domain_classifier", name=f"{kind}_classifier", system=system,
                                request=PROMPTS.render(f"{kind}_domains", question=shown, n=n), model=model,
                                step=f"domains.{kind}", max_tokens=max_tokens)
        if parsed is not None:
            return labelled(parsed.slots, "domain")
        # Both codes fall back to general medicine when the call fails, so the stage still seats n experts.
        session.record(TranscriptEvent(kind="note", role="pipeline", agent="medagents", step=f"domains.{kind}_invalid",
                                       content=f"The {kind} domains reply was invalid; {n} general-medicine experts "
                                               "take their place."))
        return ["general medicine"] * n
