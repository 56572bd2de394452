"""The participatory debate MDAgents' and KAMAC's code share: one turn of "do you want to talk?",
"to whom?" and one message per chosen expert, each its own call by the expert's own agent.

As both originals run it, a message is written into the turn's log under its addressee and reaches
that expert only through a later "do you want to talk?" prompt of the same turn that shows the log
(the methods decide when: MDAgents from its second round, KAMAC from its second turn); before that
the prompt shows the panel's opinions instead. So an expert earlier in the turn's order never hears
what a later one sends it in that turn, and the sender keeps its message in its own history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import TranscriptEvent


class Participate(BaseModel):
    talk: bool = Field(description="true if you want to talk to another expert this turn.")


class Message(BaseModel):
    message: str = Field(description="Your opinion for that expert, with a short reason.")


class ExpertChoice(BaseModel):
    """The numbers of the experts to talk to (the roster's numbering)."""

    experts: list[int]


def choice_model(n: int) -> type[ExpertChoice]:
    """`ExpertChoice` with every number from 1 to n."""
    numbers: Any = list[Literal[tuple(range(1, n + 1))]]  # type: ignore[misc]
    return create_model("ExpertChoice", __base__=ExpertChoice,
                        experts=(numbers, Field(min_length=1, description="Expert numbers.")))


@dataclass
class Member:
    name: str
    specialty: str
    agent: RoleAgent


@dataclass
class TurnLog:
    """What was sent in one turn: addressee name -> [(sender name, message)]."""

    inbox: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    talked: int = 0
    """How many experts wanted to talk (the originals' `num_yes`)."""

    def for_(self, name: str, members: list[Member]) -> str:
        sent = self.inbox.get(name, [])
        if not sent:
            return "(no messages to you this turn)"
        who = {m.name: m for m in members}
        return "\n".join(f"- {s} ({who[s].specialty}): {text}" for s, text in sent)


def roster(members: list[Member]) -> str:
    return "\n".join(f"Expert {i}: {m.specialty}" for i, m in enumerate(members, 1))


async def talk_turn(session: QuestionSession, members: list[Member], log: TurnLog, *, prompts: Prompts,
                    shown: Callable[[Member], str], method: str, round: int, turn: int,
                    speakers: list[Member] | None = None) -> TurnLog:
    """One turn of the debate for `speakers` (default: every member, in order). `shown(member)` is
    the opinions or messages its "do you want to talk?" prompt carries; `prompts` renders
    `talk`, `choose` and `message` (each method's own wording)."""
    listing = roster(members)
    for member in speakers if speakers is not None else members:
        agent = member.agent
        wants = await agent.speak(prompts.render("talk", round=round, turn=turn, opinions=shown(member)),
                                  Participate, step="debate.talk", round=round, turn=turn)
        if wants is None or not wants.talk:
            continue
        log.talked += 1
        chosen = await agent.speak(prompts.render("choose", roster=listing), choice_model(len(members)),
                                   step="debate.choose", round=round, turn=turn)
        numbers = list(dict.fromkeys(chosen.experts)) if chosen is not None else []
        for number in numbers:
            target = members[number - 1]
            said = await agent.speak(prompts.render("message", number=number, specialty=target.specialty),
                                     Message, step="debate.message", round=round, turn=turn)
            text = said.message if said is not None else ""
            if not text.strip():
                continue
            log.inbox.setdefault(target.name, []).append((member.name, text))
            data: dict[str, object] = {"from": member.name, "to": target.name}
            session.record(TranscriptEvent(kind="note", role=agent.role, agent=member.name, step="debate.sent",
                                           round=round, turn=turn, content=text, data=data))
    if speakers is None:  # a method that runs the turn speaker by speaker records it itself (`turn_note`)
        turn_note(session, log, method=method, round=round, turn=turn)
    return log


def turn_note(session: QuestionSession, log: TurnLog, *, method: str, round: int, turn: int) -> None:
    session.record(TranscriptEvent(kind="note", role="pipeline", agent=method, step="debate.turn", round=round,
                                   turn=turn, content=f"{log.talked} expert(s) wanted to talk",
                                   data={"talked": log.talked}))
