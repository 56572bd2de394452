"""The generalist of the single-generalist backbone: answers, then reconsiders with the critique
and any evidence brief in its context (its reconsidered answer is final)."""

from __future__ import annotations

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.methods.panel.roles.challenger import Critique

PROMPTS = Prompts(__name__)


def new_generalist(session: QuestionSession) -> RoleAgent:
    return RoleAgent(session, name="generalist", role="generalist", system_message=PROMPTS.render("system"))


def brief_text(brief: str) -> str:
    """An evidence brief as the generalist is shown it."""
    return PROMPTS.render("brief", brief=brief)


def critique_text(critique: Critique) -> str:
    return PROMPTS.render("critique", gap_type=critique.gap_type, challenge=critique.challenge)


def reconsider_request(material: list[str]) -> str:
    return PROMPTS.render("reconsider", material="\n\n".join(material))
