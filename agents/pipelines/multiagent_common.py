"""What the published multi-agent methods (`medagents`, `mdagents`, `kamac`) share.

Each call's `step` is `<stage>.<what>` (`domains.question`, `debate.talk`, `gap.assess` ...), so the
viewer and the tests read every method's stage order from its transcript. The final answer of each
method is a structured reply whose answer field is a `Literal` over the question's letters (or the
letters the experts hold), asked through the same `RoleAgent` path as every other pipeline: an
invalid reply is re-asked once and then counted as invalid, never defaulted.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, create_model

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import AnswerReply, R, Slots, answer_model, letters_of, letters_type
from medpanel.agents.pipelines.baselines import vote
from medpanel.agents.types import Question, TranscriptEvent


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
          round: int = 0) -> dict[str, Any]:
    """The experts' majority (ties: first to reach the count, `baselines.vote`), recorded as a vote event."""
    names = list(answers)
    result = vote([tuple(a.split(",")) if a else None for a in answers.values()])
    result["by_agent"] = dict(zip(names, answers.values(), strict=True))
    session.record(TranscriptEvent(kind="vote", role="pipeline", agent=agent, step=step, round=round,
                                   content=result["answer"] or "invalid", data=result))
    return result


def unanimous(answers: dict[str, str | None]) -> bool:
    """Every expert answered, and all the same."""
    values = list(answers.values())
    return bool(values) and None not in values and len(set(values)) == 1


async def moderate(session: QuestionSession, question: Question, *, system: str, request: str,
                   answers: dict[str, str | None], method: str, step: str = "decision.moderator",
                   open_when_empty: bool = False) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The moderator's final decision over the experts' final answers.

    Its answer type admits only the positions some expert holds (it cannot pick a letter nobody
    proposed). An invalid moderator reply falls back to the coded majority, and says so; with no
    valid expert answer at all the question is invalid, unless `open_when_empty` (an original whose
    moderator is asked even when no final answers were collected): then it may pick any option."""
    result = tally(session, answers, agent=method, step="decision.tally")
    positions = sorted({a for a in answers.values() if a})
    if not positions and open_when_empty:
        answer_type = answer_model(question.letters, multi=question.multi_answer, name="ModeratorDecision")
        moderator = RoleAgent(session, name="moderator", role="moderator", system_message=system)
        parsed = await moderator.speak(request, answer_type, step=step)
        return (letters_of(parsed) if parsed is not None else ()), {"rule": "moderator_without_answers",
                                                                   "tally": result}
    if not positions:
        return (), {"rule": "no_valid_answer", "tally": result}
    model = create_model("ModeratorDecision", __base__=AnswerReply,
                         reasoning=(str, Field(description="Brief reasoning.")),
                         answer=(letters_type(positions), Field(description="The final option, one of the "
                                                                            "experts' answers.")))
    moderator = RoleAgent(session, name="moderator", role="moderator", system_message=system)
    parsed = await moderator.speak(request, model, step=step)
    if parsed is not None:
        final, rule = str(parsed.answer), "moderator"
    else:
        final, rule = str(result["answer"]), "majority_after_invalid_moderator"
    return tuple(final.split(",")), {"rule": rule, "tally": result}


def record_final(session: QuestionSession, method: str, answer: tuple[str, ...], **data: Any) -> None:
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
                   max_tokens: int | None = None) -> R | None:
    """One stateless call by a fresh agent (the methods' stages are independent prompts, so two
    conditions that ask the same stage share the request and the response cache)."""
    agent = capped(RoleAgent(session, name=name, role=role, system_message=system), max_tokens)
    return await agent.speak(request, model, step=step, round=round, turn=turn)
