"""The selector: picks the question-conditioned specialists a panel starts with.

Its reply (`TeamChoice`) is also the recruiter's: a list of specialties, each a role label and one
line of expertise.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question

PROMPTS = Prompts(__name__)


class Specialist(BaseModel):
    role: str = Field(description="Short specialty label, e.g. Cardiologist.")
    expertise: str = Field(description="One line on the expertise this role brings.")

    @field_validator("role")
    @classmethod
    def _real_role(cls, v: str) -> str:
        # Small models copy the format hint's "<role>" slot verbatim; that is no specialty, so the
        # reply is invalid and gets the re-ask instead of seating a "<role>" on the panel.
        label = v.strip()
        if not label or (label.startswith("<") and label.endswith(">")):
            raise ValueError("write a real medical specialty (e.g. Cardiologist), not the placeholder")
        return label


class TeamChoice(BaseModel):
    specialists: list[Specialist] = Field(min_length=1, description="The chosen specialists.")


async def choose(session: QuestionSession, question: Question, n: int, *, group_note: str | None = None,
                 seated: list[str] | None = None) -> TeamChoice | None:
    """`n` specialists for `question`. In one of several groups (`group_note`), the selector is told
    the roles `seated` in earlier groups, so its group is a panel of its own."""
    selector = RoleAgent(session, name="selector", role="selector", system_message=PROMPTS.render("system"))
    request = PROMPTS.render("request", question=format_question(question), n=n)
    if group_note is not None:
        request += "\n" + PROMPTS.render("group", note=group_note, seated=", ".join(seated) if seated else "none yet")
    choice = await selector.consult(request, TeamChoice, step="select_specialists")
    return choice
