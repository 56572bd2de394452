"""Triage for the complexity-calibrated backbone: basic, intermediate or advanced."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question

PROMPTS = Prompts(__name__)

Level = Literal["basic", "intermediate", "advanced"]


class Triage(BaseModel):
    level: Level = Field(description="basic, intermediate or advanced.")
    reason: str = Field(default="", description="One sentence on why.")


async def triage(session: QuestionSession, question: Question) -> Triage | None:
    agent = RoleAgent(session, name="triage", role="triage", system_message=PROMPTS.render("system"))
    parsed = await agent.consult(PROMPTS.render("request", question=format_question(question)), Triage,
                                 step="triage")
    return parsed
