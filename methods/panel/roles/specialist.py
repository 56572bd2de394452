"""A panel specialist: one question-conditioned role that discusses turn by turn.

Its reply is the answer model of the question's own letters (`model.structured.answer_model`):
brief reasoning and a letter (or a set, for multi-answer items).
"""

from __future__ import annotations

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts

PROMPTS = Prompts(__name__)


def seat(prompts: Prompts, session: QuestionSession, *, name: str, role: str, expertise: str,
         group_note: str | None = None) -> RoleAgent:
    """A panel member for `role` with the system prompt of `prompts` (a specialist's, or the `-ind`
    assessor's own) and, in the calibrated multi-group level, its group's note."""
    system = prompts.render("system", role=role, expertise=expertise)
    if group_note is not None:
        system = f"{system}\n{group_note}"
    agent = RoleAgent(session, name=name, role="specialist", system_message=system)
    agent.label = role
    return agent


def new_specialist(session: QuestionSession, *, name: str, role: str, expertise: str,
                   group_note: str | None = None) -> RoleAgent:
    return seat(PROMPTS, session, name=name, role=role, expertise=expertise, group_note=group_note)


def turn_request(posts: str, *, round: int, turn: int) -> str:
    """A later turn: the posts this specialist has not seen yet."""
    return PROMPTS.render("turn", posts=posts or "(no new posts)", round=round, turn=turn)


def focused(text: str, challenge: str) -> str:
    """Routed coordination's focused critique round: the turn must answer this challenge point by point."""
    return f"{text}\n\n{PROMPTS.render('focused_round', challenge=challenge)}"
