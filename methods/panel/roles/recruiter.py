"""Specialist recruitment: each panel member's check (is a perspective missing?) and the recruiter,
who proposes roles that duplicate no current one (its reply is the selector's `TeamChoice`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question
from medpanel.methods.panel.roles.selector import TeamChoice

PROMPTS = Prompts(__name__)


class RecruitCheck(BaseModel):
    """One agent's answer to: is a perspective missing from the panel?"""

    needed: bool = Field(description="true if a missing specialty would change the analysis.")
    specialty: str = Field(default="", description="The missing specialty, or empty.")
    reason: str = Field(default="", description="One sentence on why.")


async def check(member: RoleAgent, panel: list[str], context: str, *, round: int, turn: int) -> RecruitCheck | None:
    """A side question to one member (`consult`: its history sees it, the discussion does not)."""
    reply = await member.consult(PROMPTS.render("check", panel=", ".join(panel), context=context), RecruitCheck,
                                 step="recruit_check", round=round, turn=turn)
    return reply


async def propose(session: QuestionSession, question: Question, panel: list[str], *, needs: str, critique: str,
                  k: int, round: int, turn: int) -> TeamChoice | None:
    recruiter = RoleAgent(session, name="recruiter", role="recruiter", system_message=PROMPTS.render("system"))
    proposal = await recruiter.consult(
        PROMPTS.render("request", question=format_question(question), panel=", ".join(panel), needs=needs,
                       critique=critique, k=k),
        TeamChoice, step="recruit", round=round, turn=turn)
    return proposal
