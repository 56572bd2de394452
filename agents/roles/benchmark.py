"""The single-model benchmark methods' calls (MedAgentsBench's Table 7 rows): few-shot, MultiPersona
(Solo Performance Prompting), Self-Refine and MedPrompt's kNN chain-of-thought answerer.

Every answering call is letter-constrained (`answer_model`); the intermediate stages (personas,
brainstorm, collaboration, feedback) are structured free-text replies, so each stage is one recorded
call with its own `step`. The control flow lives in `agents/pipelines/benchmark.py`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import answer_model
from medpanel.agents.pipelines.exemplars import Exemplar
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.roles import baseline
from medpanel.agents.types import Question

PROMPTS = Prompts(__name__)


class Personas(BaseModel):
    personas: list[str] = Field(min_length=1, max_length=4,
                                description="The experts the question needs, e.g. 'cardiologist'.")


class Brainstorm(BaseModel):
    notes: str = Field(description="Each expert's relevant facts and pitfalls, in turn.")


class Collaboration(BaseModel):
    draft: str = Field(description="The draft solution after the experts' checks.")
    critique: str = Field(description="What the experts found wrong or missing, and how it was fixed.")


class Feedback(BaseModel):
    needs_revision: bool = Field(description="True only if a concrete error or omission was found.")
    feedback: str = Field(description="Specific feedback on the answer's reasoning.")


def _examples(exemplars: list[Exemplar], *, with_rationale: bool) -> str:
    return "\n\n".join(f"Example {i}:\n{e.block(with_rationale=with_rationale)}"
                       for i, e in enumerate(exemplars, start=1))


async def few_shot(session: QuestionSession, question: Question, exemplars: list[Exemplar]) -> BaseModel | None:
    """Zero-shot's system prompt and answer-only reply, with k solved examples before the question."""
    answer_type = answer_model(question.letters, multi=question.multi_answer, reasoning=False)
    agent = RoleAgent(session, name="few_shot", role="few-shot", system_message=baseline.PROMPTS.render("direct"))
    content = PROMPTS.render("fewshot", examples=_examples(exemplars, with_rationale=False),
                             question=format_question(question))
    return await agent.speak(content, answer_type, step="answer")


async def medprompt_answer(session: QuestionSession, shuffled: Question, exemplars: list[Exemplar], *,
                           i: int, seed: int) -> BaseModel | None:
    """One member of MedPrompt's ensemble: kNN examples with their reasoning, the options shuffled."""
    answer_type = answer_model(shuffled.letters, multi=shuffled.multi_answer, reasoning=True)
    agent = RoleAgent(session, name=f"medprompt_{i}", role="medprompt", system_message=baseline.PROMPTS.render("cot"))
    # Its own seed, so two members that drew the same order are still two requests (not one cache hit).
    agent.client.overrides = {"seed": seed}
    content = PROMPTS.render("medprompt", examples=_examples(exemplars, with_rationale=True),
                             question=format_question(shuffled))
    return await agent.speak(content, answer_type, step=f"shuffle_{i}")


class PersonaSolver:
    """One model playing several experts in one conversation (each stage sees the ones before)."""

    def __init__(self, session: QuestionSession, question: Question) -> None:
        self.question = question
        self.agent = RoleAgent(session, name="solo_performer", role="multipersona",
                               system_message=PROMPTS.render("persona.system"))

    async def identify(self) -> Personas | None:
        reply = await self.agent.speak(PROMPTS.render("persona.identify", question=format_question(self.question)),
                                       Personas, step="personas")
        return reply if isinstance(reply, Personas) else None

    async def brainstorm(self, personas: str) -> BaseModel | None:
        return await self.agent.speak(PROMPTS.render("persona.brainstorm", personas=personas), Brainstorm,
                                      step="brainstorm")

    async def collaborate(self, personas: str, *, round: int, rounds: int) -> BaseModel | None:
        return await self.agent.speak(PROMPTS.render("persona.collaborate", personas=personas, round=round,
                                                     rounds=rounds), Collaboration, step="collaborate", round=round)

    async def final(self) -> BaseModel | None:
        answer_type = answer_model(self.question.letters, multi=self.question.multi_answer, reasoning=True)
        return await self.agent.speak(PROMPTS.render("persona.final"), answer_type, step="final_answer")


class Refiner:
    """Self-Refine: one model answers, criticises its own answer, and revises it, in one conversation."""

    def __init__(self, session: QuestionSession, question: Question) -> None:
        self.question = question
        self.answer_type = answer_model(question.letters, multi=question.multi_answer, reasoning=True)
        self.agent = RoleAgent(session, name="refiner", role="self-refine",
                               system_message=baseline.PROMPTS.render("cot"))

    async def initial(self) -> BaseModel | None:
        return await self.agent.speak(format_question(self.question), self.answer_type, step="answer")

    async def feedback(self, iteration: int) -> Feedback | None:
        reply = await self.agent.speak(PROMPTS.render("refine.feedback"), Feedback, step="feedback", round=iteration)
        return reply if isinstance(reply, Feedback) else None

    async def revise(self, iteration: int, iterations: int) -> BaseModel | None:
        return await self.agent.speak(PROMPTS.render("refine.revise", iteration=iteration, iterations=iterations),
                                      self.answer_type, step="refine", round=iteration)
