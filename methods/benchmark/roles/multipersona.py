"""MultiPersona as the benchmark's `multipersona-2` runs it (`baselines/MedPrompt/multi_persona.py`):
three fixed roles answer in rounds of separate calls, then a senior expert decides.

Every call is a fresh agent holding one user turn (no system message, no history). In round 1 each
role sees the question and options; in a later round it sees, besides them, the other two roles'
reasoning from the round before (not their letters, not its own); the final call sees every role's
last reasoning and letter. The role names are the benchmark's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply
from medpanel.agents.prompting import Prompts, format_question
from medpanel.agents.types import Question
from medpanel.methods.benchmark.roles.benchmark import reasoned

PROMPTS = Prompts(__name__)

ROLES: tuple[str, ...] = (
    "Innovative Medical Thinker - MD",
    "Critical Medical Analyst - Medical Professor",
    "Clinical Decision Specialist - Medical Researcher",
)
"""The benchmark's `debate_roles` (multi_persona.py lines 126-130), in its order."""

NO_REPLY = "(no valid reply)"


def _agent(session: QuestionSession, name: str, overrides: Mapping[str, object]) -> RoleAgent:
    agent = RoleAgent(session, name=name, role="multipersona", system_message=None)
    agent.client.overrides = dict(overrides)
    return agent


async def speak(session: QuestionSession, question: Question, *, index: int, round: int,
                peers: Sequence[tuple[str, str]], overrides: Mapping[str, Any]) -> AnswerReply | None:
    """Role `index` in `round` (1-based). `peers`: (role, reasoning) of the other roles' last round."""
    role = ROLES[index]
    answer_type = reasoned(question, overrides)
    if round == 1:
        content = PROMPTS.render("initial", role=role, question=format_question(question))
    else:
        context = "\n".join(f"{name}'s previous thinking: {thinking}" for name, thinking in peers)
        content = PROMPTS.render("debate", role=role, context=context, question=format_question(question))
    agent = _agent(session, f"persona_{index + 1}", overrides)
    return await agent.speak(content, answer_type, step="debate", round=round, turn=index + 1)


async def decide(session: QuestionSession, question: Question, last: Sequence[tuple[str, str, str]],
                 overrides: Mapping[str, object]) -> AnswerReply | None:
    """The senior expert: `last` is (role, reasoning, letters) of every role's last round."""
    answer_type = reasoned(question, overrides)
    thinking = "\n".join(f"{role}'s final thinking: {t}" for role, t, _ in last)
    answers = "\n".join(f"{role}'s final answer: {a}" for role, _, a in last)
    content = PROMPTS.render("final", thinking=thinking, answers=answers, question=format_question(question))
    return await _agent(session, "senior_expert", overrides).speak(content, answer_type, step="final_answer")
