"""A second method of one's own, outside medpanel: two physicians answer alone; with `x: 1` each
reads the other's reasoning and answers again. Where they still disagree, the attending's answer
stands.

Its answers are marked with `mp.AnswerAt` and its count with `mp.Vote`, so the report's answer
transition and attribution tables cover it with no other code: stage `alone`, then `exchange`,
then the final answer, and a `moderator` intervention wherever the attending settled a split.

    PYTHONPATH=examples medpanel run examples/second_opinion.yaml
"""

from __future__ import annotations

import medpanel as mp

SYSTEM = "You are a careful physician. Answer the question and give brief reasoning."
DOCTORS = ("attending", "colleague")


class OpinionPlan(mp.ConditionPlan):
    exchange: bool  # the `x` flag, decoded once when the run is planned


class OpinionSummary(mp.Summary):
    agreed: bool | None = None


class SecondOpinion(mp.Pipeline[mp.PipelineSettings, OpinionPlan]):
    plan_model = OpinionPlan
    summary_model = OpinionSummary
    flags = ("x",)

    def plan(self, condition: mp.Condition, settings: mp.PipelineSettings) -> OpinionPlan:
        return OpinionPlan(slug=condition.slug, flags=condition.flags, exchange=condition.on("x"))

    async def __call__(self, question: mp.Question, plan: OpinionPlan, session: mp.QuestionSession,
                       settings: mp.PipelineSettings) -> mp.Outcome:
        reply = mp.answer_model(question.letters, multi=question.multi_answer)
        doctors = {name: mp.RoleAgent(session, name=name, role="physician", system_message=SYSTEM) for name in DOCTORS}
        replies = {name: await d.speak(mp.format_question(question), reply, step="opinion",
                                       act=mp.AnswerAt(stage="alone")) for name, d in doctors.items()}
        if plan.exchange:
            for name, d in doctors.items():
                other = replies[DOCTORS[1] if name == DOCTORS[0] else DOCTORS[0]]
                if other is not None:
                    replies[name] = await d.speak(f"A colleague answered {', '.join(mp.letters_of(other))}: "
                                                  f"{other.reasoning}\nGive your final answer.", reply,
                                                  step="second_look", act=mp.AnswerAt(stage="exchange")
                                                  ) or replies[name]
        answers = {name: ",".join(mp.letters_of(r)) for name, r in replies.items() if r is not None}
        agreed = len(answers) == 2 and len(set(answers.values())) == 1
        final = answers.get(DOCTORS[0]) or answers.get(DOCTORS[1]) or ""
        counts = {a: float(list(answers.values()).count(a)) for a in answers.values()}
        session.record(mp.TranscriptEvent(kind="vote", role="pipeline", agent="second_opinion", step="final",
                                          content=final or "invalid", data={"answers": answers},
                                          act=mp.Vote(rule="attending on a split", tied=len(counts) > 1,
                                                      counts=counts)))
        answer = tuple(final.split(",")) if final else ()
        return mp.Outcome(answer=answer, invalid=not answer, summary=OpinionSummary(agreed=agreed))
