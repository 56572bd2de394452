"""CLEAR's follow-up judge: rules on the follow-up documents alone whether they clearly support the
challenger answer against the default (the override guard's and the challenge audit's test)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.evidence import passages_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, question_block
from medpanel.agents.types import Question
from medpanel.methods.clear.quality import quality_block
from medpanel.retrieval.evidence import Evidence

PROMPTS = Prompts(__name__)


class Judgement(BaseModel):
    """The follow-up adjudication, judged only from the follow-up documents."""

    supports_challenger: bool = Field(description="true if the documents support the challenger answer.")
    default_not_better_supported: bool = Field(description="true if the default answer is NOT better supported.")
    query_aligned: bool = Field(description="true if the documents address this exact question and situation.")
    exact_option_support: bool = Field(description="true if the support is for the exact option, not background.")
    unresolved_conflict: bool = Field(description="true if the documents still conflict on the point.")
    reason: str = Field(default="", description="One or two sentences.")


GRANT_CONDITIONS: tuple[tuple[str, bool], ...] = (
    ("supports_challenger", True),
    ("default_not_better_supported", True),
    ("query_aligned", True),
    ("exact_option_support", True),
    ("unresolved_conflict", False),
)
"""(field, required value): all must hold for the guard to grant or the audit to reopen."""


def failing(j: Judgement) -> list[str]:
    values = j.model_dump()
    return [name for name, want in GRANT_CONDITIONS if values[name] is not want]


async def judge(session: QuestionSession, question: Question, *, default: str, challenger: str,
                evidence: list[Evidence], chars: int | None, round: int) -> Judgement | None:
    agent = RoleAgent(session, name="judge", role="judge", system_message=PROMPTS.render("system"))
    prompt = PROMPTS.render("request", question=question_block(question), default=default, challenger=challenger,
                            passages=passages_block(evidence, chars), quality=quality_block(evidence))
    parsed = await agent.speak(prompt, Judgement, step="followup_judge", round=round)
    return parsed if isinstance(parsed, Judgement) else None
