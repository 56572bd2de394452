"""The meta-level Challenger: reviews a reasoning trace and names its weakest point.

It is a fresh agent on every review (it keeps no memory between turns), and its critique is
screened so that a challenge that names the answer never reaches the panel.
"""

from __future__ import annotations

import re

from medpanel.agents.client import QuestionSession
from medpanel.agents.roles import RoleAgent, format_question, render
from medpanel.agents.schemas import Critique
from medpanel.agents.types import Question

# "the answer is C", "option B is correct", "choose (D)": the Challenger may question options but
# must not hand the team an answer.
_ANSWER_LEAK = re.compile(
    r"(?:answer|correct (?:option|choice|answer))\s*(?:is|should be|=|:)\s*\(?([A-J])\)?\b"
    r"|\b(?:option|choice)\s*\(?([A-J])\)?\s+is\s+(?:the\s+)?(?:correct|right|best)\b"
    r"|\b(?:choose|select|pick)\s+(?:option\s+)?\(?([A-J])\)?(?:\s|[.,;]|$)",
    re.I,
)


def screen(critique: Critique) -> tuple[Critique, bool]:
    """Remove sentences of the challenge that state an answer; report whether any did."""
    sentences = re.split(r"(?<=[.!?])\s+", critique.challenge)
    kept = [s for s in sentences if not _ANSWER_LEAK.search(s)]
    if len(kept) == len(sentences):
        return critique, False
    text = " ".join(kept).strip() or "Re-examine the reasoning for the chosen option."
    return critique.model_copy(update={"challenge": text}), True


async def challenge(session: QuestionSession, question: Question, trace: str, *, round: int = 0,
                    turn: int = 0, depth: str = "standard") -> Critique | None:
    """`depth` (light, standard, deep) calibrates the review to the question's triaged complexity."""
    system = render("challenger")
    if depth != "standard":
        system = f"{system}\n{render(f'challenger_depth_{depth}')}"
    agent = RoleAgent(session, name="challenger", role="challenger", system_message=system)
    parsed = await agent.consult(render("critique_request", question=format_question(question), trace=trace),
                                 Critique, step="critique", round=round, turn=turn)
    if parsed is None:
        return None
    assert isinstance(parsed, Critique)
    screened, redacted = screen(parsed)
    event = agent.client.last_event
    if event is not None and redacted:
        event.data["answer_redacted"] = True
        event.parsed = screened.model_dump()
    return screened
