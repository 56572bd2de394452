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

from typing import Any, Literal

from medpanel.agents.channels.knowledge import KnowledgeChannel, KnowledgeSettings, Timing, prepare
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model, letters_of
from medpanel.agents.pipelines.base import Outcome, register
from medpanel.agents.prompting import format_question
from medpanel.agents.roles import generalist
from medpanel.agents.roles.challenger import challenge
from medpanel.agents.types import Condition, Question, TranscriptEvent

TIMING_CONDITIONS: dict[str, Timing] = {
    "no-retrieval": "none",
    "upfront": "upfront",
    "between-blind": "between_blind",
    "between-gap": "between_gap",
}


class GeneralistSettings(KnowledgeSettings):
    challenger_depth: Literal["light", "standard", "deep"] = "standard"


def resolve(condition: Condition, settings: KnowledgeSettings) -> tuple[bool, Timing]:
    """(Challenger on, retrieval timing) for a condition."""
    variant = condition.flags.get("variant")
    if isinstance(variant, str) and variant in TIMING_CONDITIONS:
        return True, TIMING_CONDITIONS[variant]
    return condition.on("c"), settings.timing if condition.on("k") else "none"


class GeneralistPipeline:
    settings_model = GeneralistSettings
    flags = ("c", "k")
    variants = tuple(TIMING_CONDITIONS)

    def prepare(self, conditions: list[Condition], settings: GeneralistSettings) -> None:
        if any(resolve(c, settings)[1] != "none" for c in conditions):
            prepare(settings)

    async def __call__(self, question: Question, condition: Condition, session: QuestionSession,
                       settings: Any) -> Outcome:
        use_challenger, timing = resolve(condition, settings)
        channel = KnowledgeChannel(session, question, settings) if timing != "none" else None
        answer_type = answer_model(question.letters, multi=question.multi_answer)
        doctor = generalist.new_generalist(session)
        opening = format_question(question)
        if channel is not None and timing == "upfront":
            brief = await channel.upfront()
            if brief is not None:
                opening = f"{generalist.brief_text(brief.text())}\n\n{opening}"
                brief.deliver([doctor.name])
        initial = await doctor.speak(opening, answer_type, step="initial")
        final, source = initial, "initial"
        summary: dict[str, Any] = {"challenged": use_challenger, "timing": timing, "material_weakness": None}
        trace = doctor.client.last_event.content if doctor.client.last_event else ""
        critique = (await challenge(session, question, trace, depth=settings.challenger_depth)
                    if use_challenger else None)
        if critique is not None:
            summary["material_weakness"] = critique.material_weakness
            summary["gap_type"] = critique.gap_type
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
            revised = await doctor.speak(generalist.reconsider_request(material), answer_type, step="reconsider")
            if revised is not None:
                final, source = revised, "reconsider"
            summary["changed"] = bool(revised and initial and letters_of(revised) != letters_of(initial))
        elif use_challenger or channel is not None:
            session.record(TranscriptEvent(kind="note", role="pipeline", agent="generalist",
                                           step="no_reconsideration",
                                           content="No material weakness and no evidence; the initial answer "
                                                   "stands."))
        if channel is not None:
            summary.update(channel.summary())
        answer = letters_of(final) if final is not None else ()
        session.record(TranscriptEvent(kind="decision", role="pipeline", agent="generalist", step="final",
                                       content=",".join(answer) or "invalid",
                                       data={"answer": list(answer), "from": source if answer else None}))
        return Outcome(answer=answer, invalid=not answer, summary=summary)


@register("generalist")
def _factory() -> GeneralistPipeline:
    return GeneralistPipeline()
