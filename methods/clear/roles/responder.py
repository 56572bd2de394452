"""CLEAR's response generator for free-text tasks (paper eq. 16): writes the reply to the user from the
decision, its rationale and the final bundle, with no retrieval of its own and no power to change
the conclusion."""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.evidence import passages_block, quote_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import Question
from medpanel.retrieval.evidence import Evidence

PROMPTS = Prompts(__name__)


class FreeTextResponse(BaseModel):
    response: str = Field(min_length=1, description="The complete reply to the user.")


async def respond(session: QuestionSession, question: Question, *, conclusion: str, rationale: str,
                  evidence: list[Evidence], chars: int | None) -> str | None:
    """r_text = G(q, a*, j*, B*): no retrieval here, and the conclusion is not reopened."""
    agent = RoleAgent(session, name="responder", role="responder", system_message=PROMPTS.render("system"))
    prompt = PROMPTS.render("request", conversation=question.text,
                    decision=quote_block("decision", f"Conclusion: {conclusion}\nRationale: {rationale}"),
                    passages=passages_block(evidence, chars))
    parsed = await agent.speak(prompt, FreeTextResponse, step="respond")
    if not isinstance(parsed, FreeTextResponse):
        return None
    return parsed.response.strip() or None
