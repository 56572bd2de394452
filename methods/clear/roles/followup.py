"""CLEAR's follow-up query writer: one search query targeted at a conflict between pathways.

It sees only the conflict (and, for MCQ, the competing options); its results only gather evidence,
which the judge or the next verification weighs.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.evidence import quote_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, question_block
from medpanel.agents.types import Question

PROMPTS = Prompts(__name__)


class FollowUpQuery(BaseModel):
    query: str = Field(min_length=3, description="One search query of at most 25 words.")


async def write_query(session: QuestionSession, question: Question, conflict: str, *, round: int) -> str:
    """The query, whitespace-normalised and at most 400 characters; empty when the reply was invalid."""
    writer = RoleAgent(session, name="followup", role="followup", system_message=PROMPTS.render("system"))
    parsed = await writer.speak(PROMPTS.render("request", question=question_block(question),
                                               conflict=quote_block("conflict", conflict)),
                                FollowUpQuery, step="followup_query", round=round)
    return " ".join(parsed.query.split())[:400] if parsed is not None else ""
