"""The moderator: breaks a tied vote, and under independent coordination weighs the auxiliary
assessments against the panel. Its answer type admits only the positions it may choose among, so
it can never pick a letter nobody proposed."""

from __future__ import annotations

from pydantic import Field, create_model

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply, letters_type
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question

PROMPTS = Prompts(__name__)


async def tie_break(session: QuestionSession, question: Question, tied: list[str], positions: str) -> str | None:
    """One of `tied` (a position may be a set of letters, "A,C"), or None when the reply is invalid twice."""
    model = create_model("TieBreak", __base__=AnswerReply, reasoning=(str, Field(description="Brief reasoning.")),
                         answer=(letters_type(tied), Field(description="One of the tied options.")))
    moderator = RoleAgent(session, name="moderator", role="moderator", system_message=PROMPTS.render("system"))
    parsed = await moderator.consult(PROMPTS.render("tiebreak", question=format_question(question),
                                                    tied=" / ".join(tied), positions=positions),
                                     model, step="tie_break")
    return None if parsed is None else str(parsed.answer)


async def weigh_assessments(session: QuestionSession, question: Question, candidates: list[str], *, positions: str,
                            assessments: str) -> str | None:
    """`-ind`: one of `candidates`, keeping the panel's position unless an assessment shows a flaw."""
    model = create_model("AuxiliaryDecision", __base__=AnswerReply,
                         reasoning=(str, Field(description="Brief reasoning.")),
                         answer=(letters_type(candidates), Field(description="One of the candidate options.")))
    moderator = RoleAgent(session, name="moderator", role="moderator",
                          system_message=PROMPTS.render("auxiliary_system"))
    parsed = await moderator.consult(PROMPTS.render("auxiliary_request", question=format_question(question),
                                                    positions=positions, assessments=assessments,
                                                    candidates=" / ".join(candidates)),
                                     model, step="auxiliary_moderation")
    return None if parsed is None else str(parsed.answer)
