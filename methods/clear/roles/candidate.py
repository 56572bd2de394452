"""CLEAR's candidate generator: one pathway's answer from its own evidence (paper section 2.2).

The same role answers for every pathway (parametric: the question alone; local: with corpus
passages; dynamic: with web documents and their quality tiers), so the pathways differ only in what
they are shown. A free-text question gets a short conclusion instead of letters.
"""

from __future__ import annotations

from pydantic import Field

from medpanel.agents.events import PathwayAnswer
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply, BareAnswer, answer_model, letters_of
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import Question
from medpanel.methods.clear.bundle import Answer

PROMPTS = Prompts(__name__)

class FreeTextAnswer(BareAnswer):
    answer: str = Field(min_length=1, description="Your conclusion, at most three sentences.")


def reply_model(q: Question) -> type[AnswerReply]:
    return answer_model(q.letters, multi=q.multi_answer) if q.options else FreeTextAnswer


def answer_of(parsed: AnswerReply | None, q: Question) -> Answer | None:
    if parsed is None:
        return None
    if not q.options:
        text = str(parsed.answer).strip()
        return (text,) if text else None
    return letters_of(parsed)


def local_request(*, passages: str, found: int, question: str) -> str:
    return PROMPTS.render("local", passages=passages, found=found, question=question)


def dynamic_request(*, passages: str, quality: str, found: int, question: str) -> str:
    return PROMPTS.render("dynamic", passages=passages, quality=quality, found=found, question=question)


async def answer(session: QuestionSession, question: Question, pathway: str, prompt: str) -> tuple[Answer | None, str]:
    """(the pathway's answer or None when invalid, its reasoning)."""
    agent = RoleAgent(session, name=pathway, role="candidate", system_message=PROMPTS.render("system"))
    parsed = await agent.speak(prompt, reply_model(question), step=pathway, act=PathwayAnswer(pathway=pathway))
    reasoning = parsed.reasoning if parsed is not None else ""
    return answer_of(parsed, question), reasoning
