"""The seed paper's single-generalist backbone: answer, Challenger, optional retrieval, reconsideration.

Flags: `c` (Challenger) and `k` (knowledge recruitment, timed by `settings.timing`), or one of the
named timing conditions of the paper's Table 1, all with the Challenger on:

| condition       | retrieval                                   | the gate sees            |
|-----------------|---------------------------------------------|--------------------------|
| `no-retrieval`  | none                                        | -                        |
| `upfront`       | before reasoning, query = question text     | - (no gate)              |
| `between-blind` | after the initial trace                     | the agent's state        |
| `between-gap`   | after the initial trace                     | state + the diagnosed gap|

The generalist reconsiders when the Challenger found a material weakness or a brief arrived, with
both in its context; its reconsidered answer is final. Otherwise the initial answer stands
(recorded as a note). With `c: 0, k: 0` the initial answer is final.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from medpanel.agents.events import AnswerAt
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model, letters_of
from medpanel.agents.pipelines.base import Outcome, Pipeline
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.prompting import format_question
from medpanel.agents.tables import TableSpec
from medpanel.agents.types import Condition, Question, TranscriptEvent
from medpanel.methods.panel.channels.knowledge import (
    KnowledgeChannel,
    KnowledgeFacts,
    KnowledgeSettings,
    Timing,
    prepare,
)
from medpanel.methods.panel.channels.tables import knowledge_table
from medpanel.methods.panel.roles import generalist
from medpanel.methods.panel.roles.challenger import challenge

TIMING_CONDITIONS: dict[str, Timing] = {
    "no-retrieval": "none",
    "upfront": "upfront",
    "between-blind": "between_blind",
    "between-gap": "between_gap",
}


class GeneralistSettings(KnowledgeSettings):
    challenger_depth: Literal["light", "standard", "deep"] = "standard"
    """How hard the Challenger looks (the calibrated backbone sets it from the triage level)."""


class GeneralistPlan(ConditionPlan):
    challenger: bool
    timing: Timing
    """When `k` retrieves: none, upfront, between_blind or between_gap."""


class GeneralistSummary(KnowledgeFacts):
    challenged: bool | None = None
    timing: Timing | None = None
    material_weakness: bool | None = None
    """None when the Challenger was off or its review invalid."""
    gap_type: str | None = None
    changed: bool | None = None
    """Set when the generalist reconsidered: whether its letters changed."""


def timing_plan(condition: Condition, settings: KnowledgeSettings) -> GeneralistPlan:
    """A named timing condition (the paper's Table 1) runs the Challenger and retrieves at its timing;
    otherwise `c` switches the Challenger and `k` retrieves at `settings.timing`."""
    variant = condition.flags.get("variant")
    if isinstance(variant, str) and variant in TIMING_CONDITIONS:
        challenger, timing = True, TIMING_CONDITIONS[variant]
    else:
        challenger, timing = condition.on("c"), settings.timing if condition.on("k") else "none"
    return GeneralistPlan(slug=condition.slug, flags=condition.flags, variant=str(variant) if variant else None,
                          challenger=challenger, timing=timing)


def prepare_retrieval(plans: Sequence[GeneralistPlan], settings: KnowledgeSettings) -> None:
    if any(p.timing != "none" for p in plans):
        prepare(settings)


class GeneralistPipeline(Pipeline[GeneralistSettings, GeneralistPlan]):
    settings_model = GeneralistSettings
    plan_model = GeneralistPlan
    summary_model = GeneralistSummary
    flags = ("c", "k")
    variants = tuple(TIMING_CONDITIONS)
    tables = (TableSpec(knowledge_table),)

    def plan(self, condition: Condition, settings: GeneralistSettings) -> GeneralistPlan:
        return timing_plan(condition, settings)

    def prepare(self, plans: Sequence[GeneralistPlan], settings: GeneralistSettings) -> None:
        prepare_retrieval(plans, settings)

    async def __call__(self, question: Question, plan: GeneralistPlan, session: QuestionSession,
                       settings: GeneralistSettings) -> Outcome:
        use_challenger, timing = plan.challenger, plan.timing
        channel = KnowledgeChannel(session, question, settings) if timing != "none" else None
        answer_type = answer_model(question.letters, multi=question.multi_answer)
        doctor = generalist.new_generalist(session)
        opening = format_question(question)
        if channel is not None and timing == "upfront":
            brief = await channel.upfront()
            if brief is not None:
                opening = f"{generalist.brief_text(brief.text())}\n\n{opening}"
                brief.deliver([doctor.name])
        initial = await doctor.speak(opening, answer_type, step="initial", act=AnswerAt(stage="initial"))
        final, source = initial, "initial"
        summary = GeneralistSummary(challenged=use_challenger, timing=timing, material_weakness=None)
        trace = doctor.client.last_event.content if doctor.client.last_event else ""
        critique = (await challenge(session, question, trace, depth=settings.challenger_depth)
                    if use_challenger else None)
        if critique is not None:
            summary.material_weakness = critique.material_weakness
            summary.gap_type = critique.gap_type
        brief = None
        if channel is not None and timing in ("between_blind", "between_gap"):
            brief = await channel.between(trace, critique, blind=timing == "between_blind")
        material = []
        if critique is not None and critique.material_weakness:
            material.append(generalist.critique_text(critique))
        if brief is not None:
            material.append(generalist.brief_text(brief.text()))
            brief.deliver([doctor.name])
        if material:
            revised = await doctor.speak(generalist.reconsider_request(material), answer_type, step="reconsider",
                                         act=AnswerAt(stage="reconsider"))
            if revised is not None:
                final, source = revised, "reconsider"
            summary.changed = bool(revised and initial and letters_of(revised) != letters_of(initial))
        elif use_challenger or channel is not None:
            session.record(TranscriptEvent(kind="note", role="pipeline", agent="generalist",
                                           step="no_reconsideration",
                                           content="No material weakness and no evidence; the initial answer "
                                                   "stands."))
        if channel is not None:
            summary.add(channel.facts())
        answer = letters_of(final) if final is not None else ()
        session.record(TranscriptEvent(kind="decision", role="pipeline", agent="generalist", step="final",
                                       content=",".join(answer) or "invalid",
                                       data={"answer": list(answer), "from": source if answer else None}))
        return Outcome(answer=answer, invalid=not answer, summary=summary)
