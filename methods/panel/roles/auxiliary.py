"""The auxiliary assessor of independent coordination (`-ind`, paper section 3.2 and A.2).

A recruit consulted once, on joining, for a targeted assessment of the gap that summoned it: the
question and that gap (the Challenger's critique, what the panel said was missing), never a brief
or the panel's posts. It answers with its assessment and the option it would choose.
"""

from __future__ import annotations

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply, answer_model
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question
from medpanel.methods.panel.roles.specialist import seat

PROMPTS = Prompts(__name__)


def new_assessor(session: QuestionSession, *, name: str, role: str, expertise: str,
                 group_note: str | None = None) -> RoleAgent:
    return seat(PROMPTS, session, name=name, role=role, expertise=expertise, group_note=group_note)


async def assess(agent: RoleAgent, question: Question, *, role: str, gap: str, round: int,
                 turn: int) -> AnswerReply | None:
    model = answer_model(question.letters, multi=question.multi_answer, name="AuxiliaryAssessment")
    return await agent.speak(PROMPTS.render("request", question=format_question(question), role=role, gap=gap),
                             model, step="auxiliary_assessment", round=round, turn=turn)
