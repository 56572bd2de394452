"""The Evidence Curator: keeps the factual, non-redundant passages that address the gap and writes a
brief of five to eight points, each citing its passages (paper section 3.2)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.evidence import passages_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question
from medpanel.retrieval.evidence import Evidence

PROMPTS = Prompts(__name__)


class BriefPoint(BaseModel):
    point: str = Field(description="One factual evidence point relevant to the gap.")
    sources: list[int] = Field(description="Numbers of the passages that support it, e.g. [2, 5].")


class Brief(BaseModel):
    points: list[BriefPoint] = Field(min_length=5, max_length=8, description="Five to eight evidence points.")


async def curate(session: QuestionSession, question: Question, gap: str, passages: list[Evidence], *,
                 chars: int | None, round: int, turn: int) -> Brief | None:
    curator = RoleAgent(session, name="evidence_curator", role="curator", system_message=PROMPTS.render("system"))
    prompt = PROMPTS.render("request", question=format_question(question), gap=gap,
                            passages=passages_block(passages, chars))
    brief = await curator.consult(prompt, Brief, step="curate", round=round, turn=turn)
    return brief
