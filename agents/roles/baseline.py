"""The single-model baselines' answerer: zero-shot (`direct`), chain of thought (`cot`), and the
self-consistency sampler (a chain-of-thought answerer whose calls carry a per-sample seed and
temperature)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from medpanel.agents.events import AnswerAt
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import BRIEF_REASONING, FREE_REASONING, AnswerReply, answer_model
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question

PROMPTS = Prompts(__name__)


def reasoning_hint(overrides: Mapping[str, object] | None) -> str:
    """What a reply's reasoning field asks for: full length when the call is sent with no reply cap
    (`max_tokens: None`, as the benchmark's code sends most calls), else brief, to fit the cap."""
    uncapped = overrides is not None and "max_tokens" in overrides and overrides["max_tokens"] is None
    return FREE_REASONING if uncapped else BRIEF_REASONING


async def answer(session: QuestionSession, question: Question, kind: Literal["direct", "cot"],
                 overrides: Mapping[str, Any] | None = None) -> AnswerReply | None:
    """One call: the letter only (`direct`) or reasoning first (`cot`). `overrides`: per-call sampling
    parameters (the benchmark context's reply caps); none keeps the request the baselines send."""
    answer_type = answer_model(question.letters, multi=question.multi_answer, reasoning=kind == "cot",
                               reasoning_hint=reasoning_hint(overrides))
    agent = RoleAgent(session, name=kind, role=kind, system_message=PROMPTS.render(kind))
    agent.client.overrides = dict(overrides or {})
    return await agent.speak(format_question(question), answer_type, step="answer", act=AnswerAt(stage="answer"))


async def sample(session: QuestionSession, question: Question, *, i: int, seed: int,
                 temperature: float, overrides: Mapping[str, object] | None = None) -> AnswerReply | None:
    """Self-consistency sample `i`: a fresh agent that sees no other sample."""
    answer_type = answer_model(question.letters, multi=question.multi_answer, reasoning=True,
                               reasoning_hint=reasoning_hint(overrides))
    agent = RoleAgent(session, name="sampler", role="sc", system_message=PROMPTS.render("cot"))
    agent.client.overrides = {**(overrides or {}), "seed": seed, "temperature": temperature}
    return await agent.speak(format_question(question), answer_type, step=f"sample_{i}",
                             act=AnswerAt(stage="answer", voter=f"sample_{i}"))
