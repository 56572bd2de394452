"""The Knowledge Gate: is the current reasoning gap addressable by retrieval, and if so, for what?

It sees the agents' state and, unless the timing is blind, the Challenger's diagnosis as advisory
context (paper section 3.2); a critique never triggers retrieval by itself.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question
from medpanel.methods.panel.roles.challenger import Critique

PROMPTS = Prompts(__name__)


class GateDecision(BaseModel):
    """The Knowledge Gate's call: retrieve or not, and for what."""

    retrieve: bool = Field(description="true only if external medical evidence would likely resolve the gap.")
    knowledge_gap: str = Field(description="The unresolved clinical or biomedical point, in one sentence.")
    query: str = Field(description="A narrow search query for that point, or empty if retrieve is false.")


async def decide(session: QuestionSession, question: Question, state: str, critique: Critique | None, *,
                 round: int, turn: int) -> GateDecision | None:
    gate = RoleAgent(session, name="knowledge_gate", role="knowledge_gate", system_message=PROMPTS.render("system"))
    diagnosis = ""
    if critique is not None:
        diagnosis = (f"\nThe Challenger's diagnosis (advisory; make your own decision):\n"
                     f"[Material weakness] {'yes' if critique.material_weakness else 'no'}\n"
                     f"[Gap type] {critique.gap_type}\n[Challenge] {critique.challenge}\n")
    prompt = PROMPTS.render("request", question=format_question(question), state=state, diagnosis=diagnosis)
    parsed = await gate.consult(prompt, GateDecision, step="gate", round=round, turn=turn)
    return parsed if isinstance(parsed, GateDecision) else None
