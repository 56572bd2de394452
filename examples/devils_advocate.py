"""A method of one's own, outside medpanel: a generalist answers, and with `d: 1` an advocate argues
for the strongest other option before the generalist gives its final answer.

Run it from the repository root (the module must be importable, here from examples/):

    PYTHONPATH=examples medpanel run examples/devils_advocate.yaml
"""

from __future__ import annotations

import medpanel as mp

SYSTEM = "You are a careful physician. Answer the question and give brief reasoning."


class AdvocatePlan(mp.ConditionPlan):
    advocate: bool  # the `d` flag, decoded once when the run is planned


class AdvocateSummary(mp.Summary):
    changed: bool | None = None


class DevilsAdvocate(mp.Pipeline[mp.PipelineSettings, AdvocatePlan]):
    plan_model = AdvocatePlan
    summary_model = AdvocateSummary
    flags = ("d",)

    def plan(self, condition: mp.Condition, settings: mp.PipelineSettings) -> AdvocatePlan:
        return AdvocatePlan(slug=condition.slug, flags=condition.flags, advocate=condition.on("d"))

    async def __call__(self, question: mp.Question, plan: AdvocatePlan, session: mp.QuestionSession,
                       settings: mp.PipelineSettings) -> mp.Outcome:
        reply = mp.answer_model(question.letters, multi=question.multi_answer)
        doctor = mp.RoleAgent(session, name="doctor", role="generalist", system_message=SYSTEM)
        first = final = await doctor.speak(mp.format_question(question), reply, step="initial",
                                           act=mp.AnswerAt(stage="initial"))
        if plan.advocate and first is not None:
            chosen = ", ".join(mp.letters_of(first))
            advocate = mp.RoleAgent(session, name="advocate", role="advocate", system_message=SYSTEM)
            case = await advocate.speak(f"{mp.format_question(question)}\n\nA colleague chose {chosen}. Argue "
                                        "for the strongest other option.", reply, step="argue")
            if case is not None:
                argument = case.reasoning
                final = await doctor.speak(f"A colleague argues:\n{argument}\nReconsider.", reply,
                                           step="reconsider", act=mp.AnswerAt(stage="reconsider")) or first
        answer = mp.letters_of(final) if final is not None else ()
        changed = first is not None and final is not None and mp.letters_of(first) != answer
        return mp.Outcome(answer=answer, invalid=not answer, summary=AdvocateSummary(changed=changed))
