"""What the published multi-agent methods (`medagents`, `mdagents`, `kamac`) share.

Each call's `step` is `<stage>.<what>` (`domains.question`, `debate.talk`, `gap.assess` ...), so the
viewer and the tests read every method's stage order from its transcript. The final answer of each
method is a structured reply whose answer field is a `Literal` over the question's letters (or the
letters the experts hold), asked through the same `RoleAgent` path as every other pipeline: an
invalid reply is re-asked once and then counted as invalid, never defaulted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, create_model

from medpanel.agents.events import Vote
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply, R, Slots, answer_model, letters_of
from medpanel.agents.pipelines.tally import vote
from medpanel.agents.types import Question, TranscriptEvent

REASONING = "Your reasoning."
"""The reasoning field of the methods' answers: no length asked for, as none of the codes asks for
one (their replies are free text); the model block's `max_tokens` is the only bound."""

PROVIDER_TEMPERATURE: Mapping[str, Any] = {"temperature": None}
"""The sampling of a call whose code passes no temperature (MDAgents' `Agent.chat`): the request
carries none, so the provider's default applies (OpenAI's is 1.0)."""


def method_answer(question: Question, *, name: str = "Answer", reasoning: str | None = REASONING) -> type[AnswerReply]:
    """A method's answer over the question's letters: a reasoning field of free length first, or
    none (`reasoning=None`: a code that asks for the letter alone)."""
    return answer_model(question.letters, multi=question.multi_answer, name=name, reasoning=reasoning is not None,
                        reasoning_hint=reasoning or REASONING)


def sampled(agent: RoleAgent, sampling: Mapping[str, object]) -> RoleAgent:
    """`agent` with these sampling overrides on every call it makes (`PROVIDER_TEMPERATURE`)."""
    agent.client.overrides.update(sampling)
    return agent


def numbered_model(name: str, prefix: str, n: int, description: str, **extra: Any) -> type[Slots]:
    """A reply with `n` string fields `<prefix>_1` ... `<prefix>_n`, read as its `slots` list (small
    models fill named slots far more reliably than a list of a given length)."""
    fields: dict[str, Any] = {f"{prefix}_{i}": (str, Field(description=description)) for i in range(1, n + 1)}
    fields.update(extra)
    return create_model(name, __base__=Slots, **fields)


def labelled(slots: list[str], prefix: str) -> list[str]:
    """Slot values with a blank one named by its place (`expert 3`)."""
    return [value.strip() or f"{prefix} {i}" for i, value in enumerate(slots, 1)]


def answer_key(parsed: AnswerReply | None) -> str | None:
    """A parsed answer reply as one vote key ("A", or "A,C" for a multi-answer set)."""
    return ",".join(letters_of(parsed)) if parsed is not None else None


def tally(session: QuestionSession, answers: dict[str, str | None], *, agent: str, step: str,
          round: int = 0) -> dict[str, object]:
    """The experts' majority (ties: first to reach the count, `tally.vote`), recorded as a vote event."""
    names = list(answers)
    result = vote([tuple(a.split(",")) if a else None for a in answers.values()])
    result["by_agent"] = dict(zip(names, answers.values(), strict=True))
    session.record(TranscriptEvent(kind="vote", role="pipeline", agent=agent, step=step, round=round,
                                   content=result["answer"] or "invalid", data=result, act=Vote.of(result)))
    return result


def unanimous(answers: dict[str, str | None]) -> bool:
    """Every expert answered, and all the same."""
    values = list(answers.values())
    return bool(values) and None not in values and len(set(values)) == 1


async def moderate(session: QuestionSession, question: Question, *, system: str, request: str,
                   answers: dict[str, str | None], method: str,
                   step: str = "decision.moderator") -> tuple[tuple[str, ...], dict[str, Any]]:
    """The moderator's final decision over the experts' final answers.

    As in both codes (MDAgents' and KAMAC's moderator replies in free text, read for any letter),
    it may choose any of the question's options, and it is asked even when no expert's answer was
    collected or valid. An invalid moderator reply falls back to the coded majority, and says so;
    with no valid expert answer either, the question is invalid."""
    result = tally(session, answers, agent=method, step="decision.tally")
    moderator = RoleAgent(session, name="moderator", role="moderator", system_message=system)
    parsed = await moderator.speak(request, method_answer(question, name="ModeratorDecision"), step=step)
    if parsed is not None:
        return letters_of(parsed), {"rule": "moderator" if answers else "moderator_without_answers", "tally": result}
    if result["answer"]:
        return tuple(str(result["answer"]).split(",")), {"rule": "majority_after_invalid_moderator", "tally": result}
    return (), {"rule": "no_valid_answer", "tally": result}


def record_final(session: QuestionSession, method: str, answer: tuple[str, ...], **data: object) -> None:
    session.record(TranscriptEvent(kind="decision", role="pipeline", agent=method, step="final",
                                   content=",".join(answer) or "invalid", data={"answer": list(answer), **data}))


def opinions_block(answers: dict[str, str | None], texts: dict[str, str]) -> str:
    """The experts' current positions as one block every expert is shown."""
    lines = []
    for name, ans in answers.items():
        lines.append(f"- {name}: answer {ans or '(no valid answer)'}. {texts.get(name, '')}".rstrip())
    return "\n".join(lines)


def capped(agent: RoleAgent, max_tokens: int | None) -> RoleAgent:
    """`agent` with its own reply cap for every call it makes (None: the model block's `max_tokens`,
    for the calls where a method's code sets no cap)."""
    if max_tokens is not None:
        agent.client.overrides["max_tokens"] = max_tokens
    else:
        agent.client.overrides.pop("max_tokens", None)
    return agent


async def ask_once(session: QuestionSession, *, role: str, name: str, system: str, request: str,
                   model: type[R], step: str, round: int = 0, turn: int = 0,
                   max_tokens: int | None = None, sampling: Mapping[str, Any] = {}) -> R | None:
    """One stateless call by a fresh agent (the methods' stages are independent prompts, so two
    conditions that ask the same stage share the request and the response cache)."""
    agent = sampled(capped(RoleAgent(session, name=name, role=role, system_message=system), max_tokens), sampling)
    return await agent.speak(request, model, step=step, round=round, turn=turn)
