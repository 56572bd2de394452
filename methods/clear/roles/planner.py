"""CLEAR's query planner (`clear-qpis`): sub-queries for the dynamic pathway, then, after each
search round, whether the documents suffice and what to search next. One agent per question, so
each sufficiency check continues the planner's own conversation."""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.evidence import passages_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, question_block
from medpanel.agents.types import Question
from medpanel.retrieval.evidence import Evidence

PROMPTS = Prompts(__name__)


class QueryPlan(BaseModel):
    sub_queries: list[str] = Field(min_length=1, description="Focused search queries, one per sub-question.")


class Sufficiency(BaseModel):
    sufficient: bool = Field(description="true if the passages are enough to answer the question.")
    missing: str = Field(default="", description="What is still missing, in one sentence.")
    next_queries: list[str] = Field(default_factory=list, description="New queries for what is missing.")


class Planner:
    def __init__(self, session: QuestionSession, question: Question, *, n: int) -> None:
        self.agent = RoleAgent(session, name="planner", role="planner", system_message=PROMPTS.render("system"))
        self.block = question_block(question)
        self.n = n
        """Sub-queries asked for per round."""

    async def plan(self) -> list[str]:
        parsed = await self.agent.speak(PROMPTS.render("plan", question=self.block, n=self.n), QueryPlan, step="plan")
        return parsed.sub_queries if isinstance(parsed, QueryPlan) else []

    async def check(self, docs: list[Evidence], *, chars: int | None, round: int) -> Sufficiency | None:
        parsed = await self.agent.speak(PROMPTS.render("sufficiency", question=self.block,
                                                       passages=passages_block(docs, chars), n=self.n),
                                        Sufficiency, step="sufficiency", round=round)
        return parsed if isinstance(parsed, Sufficiency) else None
