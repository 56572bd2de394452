"""The seed paper's single-generalist backbone: answer, optional Challenger, reconsideration.

With `c: 1` the Challenger reviews the initial trace; if it finds a material weakness the
generalist reconsiders with the critique in its context and its reconsidered answer is final.
If the Challenger finds none, the initial answer stands (recorded as a note). With `c: 0` the
initial answer is final.
"""

from __future__ import annotations

from typing import Any

from medpanel.agents.challenger import challenge
from medpanel.agents.client import QuestionSession
from medpanel.agents.pipelines.base import Outcome, PipelineSettings, register
from medpanel.agents.roles import RoleAgent, format_question, render
from medpanel.agents.structured import answer_model
from medpanel.agents.types import Condition, Question, TranscriptEvent


class GeneralistSettings(PipelineSettings):
    pass


def letters_of(parsed: Any) -> tuple[str, ...]:
    ans = parsed.answer
    return tuple(sorted(set(ans))) if isinstance(ans, list) else (ans,)


class GeneralistPipeline:
    settings_model = GeneralistSettings
    flags = ("c",)

    async def __call__(self, question: Question, condition: Condition, session: QuestionSession,
                       settings: Any) -> Outcome:
        answer_type = answer_model(question.letters, multi=question.multi_answer)
        doctor = RoleAgent(session, name="generalist", role="generalist", system_message=render("generalist"))
        initial = await doctor.speak(format_question(question), answer_type, step="initial")
        final, source = initial, "initial"
        summary: dict[str, Any] = {"challenged": False, "material_weakness": None}
        if condition.on("c"):
            trace = doctor.client.last_event.content if doctor.client.last_event else ""
            critique = await challenge(session, question, trace)
            summary["challenged"] = True
            summary["material_weakness"] = critique.material_weakness if critique else None
            summary["gap_type"] = critique.gap_type if critique else None
            if critique is not None and critique.material_weakness:
                revised = await doctor.speak(render("reconsider", gap_type=critique.gap_type,
                                                    challenge=critique.challenge),
                                             answer_type, step="reconsider")
                if revised is not None:
                    final, source = revised, "reconsider"
                summary["changed"] = bool(revised and initial and letters_of(revised) != letters_of(initial))
            else:
                session.record(TranscriptEvent(kind="note", role="pipeline", agent="generalist",
                                               step="no_reconsideration",
                                               content="No material weakness found; the initial answer stands."))
        answer = letters_of(final) if final is not None else ()
        session.record(TranscriptEvent(kind="decision", role="pipeline", agent="generalist", step="final",
                                       content=",".join(answer) or "invalid",
                                       data={"answer": list(answer), "from": source if answer else None}))
        return Outcome(answer=answer, invalid=not answer, summary=summary)


@register("generalist")
def _factory() -> GeneralistPipeline:
    return GeneralistPipeline()
