"""The single-model benchmark methods' calls (MedAgentsBench's Table 7 rows): few-shot, MedPrompt (the
benchmark's generate-then-choose `medprompt-3` and Nori et al.'s choice-shuffle ensemble), Self-Refine,
CoT-SC's aggregation call, and the SPP-style MultiPersona conversation (`spp`). The benchmark's
three-role debate is `methods/benchmark/roles/multipersona.py`.

Every call is structured: an answering call's letter is constrained to the options
(`answer_model`), a choosing call's number to the solutions shown, so no second "extractor" call is
made. `overrides` are per-call sampling parameters (`max_tokens` above all: the benchmark's code sets
a reply cap for zero-shot only). The control flow lives in `methods/benchmark/flows.py`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field, create_model

from medpanel.agents.events import AnswerAt
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply, answer_model, letters_type
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.roles import baseline
from medpanel.agents.roles.exemplars import Exemplar
from medpanel.agents.types import Question

PROMPTS = Prompts(__name__)
Overrides = Mapping[str, Any]


class Personas(BaseModel):
    personas: list[str] = Field(min_length=1, max_length=4,
                                description="The experts the question needs, e.g. 'cardiologist'.")


class Brainstorm(BaseModel):
    notes: str = Field(description="Each expert's relevant facts and pitfalls, in turn.")


class Collaboration(BaseModel):
    draft: str = Field(description="The draft solution after the experts' checks.")
    critique: str = Field(description="What the experts found wrong or missing, and how it was fixed.")


class Review(BaseModel):
    explanation: str = Field(description="Your step-by-step check of the solution, and the error if you found one.")
    correct: bool = Field(description="False only if you are more than 95 percent confident the solution is wrong.")


class ParsedReview(BaseModel):
    """What the benchmark's parser call returns for a review (`self_refine.py` line 176): an
    explanation and a verdict, its schema's two required fields, with no descriptions."""

    explanation: str
    review_result: bool


class SolutionChoice(BaseModel):
    """MedPrompt's choosing reply: the number of one shown solution, nothing else."""

    choice: str


@functools.lru_cache(maxsize=64)
def choice_model(labels: tuple[str, ...]) -> type[SolutionChoice]:
    """`SolutionChoice` with `choice` one of `labels`."""
    return create_model("SolutionChoice", __base__=SolutionChoice,
                        choice=(letters_type(labels), Field(description="The number of the chosen solution.")))


def _agent(session: QuestionSession, *, name: str, role: str, system: str | None,
           overrides: Overrides | None) -> RoleAgent:
    agent = RoleAgent(session, name=name, role=role, system_message=system)
    agent.client.overrides = dict(overrides or {})
    return agent


def reasoned(question: Question, overrides: Overrides | None) -> type[AnswerReply]:
    """The answering reply with reasoning first; full-length reasoning when the call has no reply cap."""
    return answer_model(question.letters, multi=question.multi_answer, reasoning=True,
                        reasoning_hint=baseline.reasoning_hint(overrides))


def _examples(exemplars: Sequence[Exemplar], *, with_rationale: bool) -> str:
    return "\n\n".join(f"Example {i}:\n{e.block(with_rationale=with_rationale)}"
                       for i, e in enumerate(exemplars, start=1))


def solution_text(parsed: AnswerReply) -> str:
    """A structured answer as a later call is shown it: the reasoning, then the letter(s)."""
    ans = parsed.answer
    letters = ", ".join(ans) if isinstance(ans, list) else ans
    reasoning = parsed.reasoning.strip()
    return f"{reasoning}\nAnswer: {letters}" if reasoning else f"Answer: {letters}"


async def few_shot(session: QuestionSession, question: Question, exemplars: list[Exemplar],
                   overrides: Overrides | None = None) -> AnswerReply | None:
    """Zero-shot's system prompt and answer-only reply, with k solved examples before the question."""
    answer_type = answer_model(question.letters, multi=question.multi_answer, reasoning=False)
    agent = _agent(session, name="few_shot", role="few-shot", system=baseline.PROMPTS.render("direct"),
                   overrides=overrides)
    content = PROMPTS.render("fewshot", examples=_examples(exemplars, with_rationale=False),
                             question=format_question(question))
    return await agent.speak(content, answer_type, step="answer", act=AnswerAt(stage="answer"))


# -- MedPrompt, as the benchmark's medprompt-3 runs it: generate, then choose among the solutions -----------


async def medprompt_generate(session: QuestionSession, question: Question, exemplars: Sequence[Exemplar], *,
                             i: int, overrides: Overrides) -> AnswerReply | None:
    """Generation i: the kNN examples as question and answer text, then the question with its options
    in their own order. A user turn alone (the benchmark sends no system message)."""
    answer_type = reasoned(question, overrides)
    agent = _agent(session, name=f"medprompt_generate_{i}", role="medprompt", system=None, overrides=overrides)
    examples = "\n\n".join(f"Example {n}:\n{e.qa_block()}" for n, e in enumerate(exemplars, start=1))
    content = PROMPTS.render("medprompt.generate", examples=examples, question=format_question(question))
    return await agent.speak(content, answer_type, step=f"generate_{i}")


async def medprompt_choose(session: QuestionSession, question: Question, solutions: Sequence[str], *,
                           i: int, overrides: Overrides) -> str | None:
    """Choosing call i: the stem (no options) and the solutions in this call's order, numbered from 0;
    the reply is one of those numbers (or None, unparsed after the re-ask)."""
    labels = tuple(str(n) for n in range(len(solutions)))
    agent = _agent(session, name=f"medprompt_choose_{i}", role="medprompt", system=None, overrides=overrides)
    shown = "\n\n".join(f"{n}:\n{s}" for n, s in enumerate(solutions))
    content = PROMPTS.render("medprompt.choose", stem=question.text, solutions=shown, labels=", ".join(labels))
    reply = await agent.speak(content, choice_model(labels), step=f"choose_{i}")
    return reply.choice if reply is not None else None


async def medprompt_shuffle_member(session: QuestionSession, shuffled: Question, exemplars: list[Exemplar], *,
                                   i: int, seed: int, overrides: Overrides) -> AnswerReply | None:
    """One member of Nori et al.'s ensemble: kNN examples with their reasoning, the options shuffled."""
    answer_type = reasoned(shuffled, overrides)
    agent = _agent(session, name=f"medprompt_{i}", role="medprompt", system=baseline.PROMPTS.render("cot"),
                   overrides=overrides)
    # Its own seed, so two members that drew the same order are still two requests (not one cache hit).
    agent.client.overrides["seed"] = seed
    content = PROMPTS.render("medprompt", examples=_examples(exemplars, with_rationale=True),
                             question=format_question(shuffled))
    return await agent.speak(content, answer_type, step=f"shuffle_{i}")


# -- Self-Refine, as the benchmark's self_refine-3 runs it: every stage a fresh, stateless call --------------


class Refiner:
    """Generate, review and revise: each call a new agent holding one user turn (no system message,
    no history), as the benchmark's `call_llm` sends them. Review and revision see the stem and the
    solution's text, never the options."""

    def __init__(self, session: QuestionSession, question: Question, overrides: Overrides) -> None:
        self.session = session
        self.question = question
        self.overrides = overrides
        self.answer_type = reasoned(question, overrides)

    def _fresh(self, stage: str) -> RoleAgent:
        return _agent(self.session, name=f"refiner_{stage}", role="self-refine", system=None,
                      overrides=self.overrides)

    async def generate(self) -> AnswerReply | None:
        content = PROMPTS.render("refine.generate", question=format_question(self.question))
        return await self._fresh("generate").speak(content, self.answer_type, step="answer",
                                                        act=AnswerAt(stage="answer"))

    async def review(self, solution: str, iteration: int) -> Review | None:
        content = PROMPTS.render("refine.review", stem=self.question.text, solution=solution)
        reply = await self._fresh("review").speak(content, Review, step="review", round=iteration)
        return reply

    async def parse_review(self, iteration: int) -> ParsedReview | None:
        """The benchmark's parser call on a review, as its code builds it: an operator-precedence slip
        in `parse_answer` (`self_refine.py` lines 100-105) leaves the review's text out of the prompt,
        so the parser is asked to extract from a text it is never shown. Sent with no temperature, as
        that call passes none, and a seed of its own per question and iteration: the request is the
        same for every question, and one cached reply must not decide them all."""
        key = f"{self.question.dataset}/{self.question.qid}/review-parse/{iteration}"
        seed = (self.session.spec.seed or 0) + int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
        agent = _agent(self.session, name="refiner_parser", role="self-refine-parser", system=None,
                       overrides={**self.overrides, "temperature": None, "seed": seed})
        return await agent.speak(PROMPTS.render("refine.parse"), ParsedReview, step="review_parse", round=iteration)

    async def revise(self, solution: str, feedback: str, iteration: int) -> AnswerReply | None:
        content = PROMPTS.render("refine.revise", stem=self.question.text, solution=solution, feedback=feedback)
        return await self._fresh("revise").speak(content, self.answer_type, step="refine", round=iteration)


# -- CoT-SC's sixth call: one answer from the samples' letters ----------------------------------------------


async def cot_sc_aggregate(session: QuestionSession, question: Question, letters: Sequence[str],
                           overrides: Overrides) -> AnswerReply | None:
    """The question, its options and each sample's letter (never its reasoning), as `cot_sc.py`'s
    `ensemble_solutions` shows them; the reply names the most consistent answer."""
    answer_type = reasoned(question, overrides)
    agent = _agent(session, name="cot_sc_aggregator", role="cot-sc", system=PROMPTS.render("cotsc.system"),
                   overrides=overrides)
    solutions = "\n".join(f"Solution {n}:\n{x}" for n, x in enumerate(letters, start=1))
    content = PROMPTS.render("cotsc.aggregate", question=format_question(question), solutions=solutions)
    return await agent.speak(content, answer_type, step="aggregate")


# -- SPP (the `spp` variant): one model playing several experts in one conversation --------------------------


class PersonaSolver:
    """Solo Performance Prompting: each stage sees the ones before it in one conversation."""

    def __init__(self, session: QuestionSession, question: Question, overrides: Overrides | None = None) -> None:
        self.question = question
        self.overrides = overrides
        self.agent = _agent(session, name="solo_performer", role="multipersona",
                            system=PROMPTS.render("persona.system"), overrides=overrides)

    async def identify(self) -> Personas | None:
        reply = await self.agent.speak(PROMPTS.render("persona.identify", question=format_question(self.question)),
                                       Personas, step="personas")
        return reply

    async def brainstorm(self, personas: str) -> Brainstorm | None:
        return await self.agent.speak(PROMPTS.render("persona.brainstorm", personas=personas), Brainstorm,
                                      step="brainstorm")

    async def collaborate(self, personas: str, *, round: int, rounds: int) -> Collaboration | None:
        return await self.agent.speak(PROMPTS.render("persona.collaborate", personas=personas, round=round,
                                                     rounds=rounds), Collaboration, step="collaborate", round=round)

    async def final(self) -> AnswerReply | None:
        answer_type = reasoned(self.question, self.overrides)
        return await self.agent.speak(PROMPTS.render("persona.final"), answer_type, step="final_answer")
