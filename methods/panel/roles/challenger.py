"""The meta-level Challenger: reviews a reasoning trace and names its weakest point.

It is a fresh agent on every review (what it remembers of earlier turns is what the trace it is
given shows), and its critique is screened so that a challenge that names the answer never reaches
the team: a leaking challenge is re-asked once, and a rewrite that still leaks is redacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from medpanel.agents import events
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.context import Part
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import Question
from medpanel.methods.panel.roles.leak_screen import leaks as leaks  # re-exported: the screen's callers ask here
from medpanel.methods.panel.roles.leak_screen import sentences

PROMPTS = Prompts(__name__)

GapType = Literal[
    "none",
    "logical_inconsistency",
    "missing_differential",
    "insufficient_evidence",
    "unresolved_option_conflict",
    "missing_expertise",
]


class Critique(BaseModel):
    """The Challenger's structured review of a reasoning trace (the paper's (j_t, delta_t))."""

    material_weakness: bool = Field(description="true if the reasoning has a material weakness.")
    gap_type: GapType = Field(description="The kind of weakness, or none.")
    challenge: str = Field(description="One targeted challenge to the team; never the answer.")


REDACTED = "Re-examine the reasoning for the chosen option."
"""What is left of a challenge whose every sentence named an answer."""


def screen(critique: Critique, options: dict[str, str]) -> tuple[Critique, bool]:
    """Remove the sentences of the challenge that state an answer; report whether any did."""
    if not leaks(critique.challenge, options):
        return critique, False
    kept = [s for s in sentences(critique.challenge) if not leaks(s, options)]
    text = " ".join(kept).strip()
    if not text or leaks(text, options):
        text = REDACTED
    return critique.model_copy(update={"challenge": text}), True


async def challenge(session: QuestionSession, question: Question, trace: str, *, round: int = 0,
                    turn: int = 0, depth: str = "standard", panel: PanelReview | None = None,
                    parts: list[Part] | None = None) -> Critique | None:
    """`depth` (light, standard, deep) calibrates the review to the question's triaged complexity.

    `panel` asks the panel's review request (the accumulated trace of its turns) instead of the
    single trace's; `parts` are the pieces of it a bounded context window may drop (earlier positions).
    """
    system = ("system",) if depth == "standard" else ("system", f"depth_{depth}")
    if panel is None:
        request = PROMPTS.request(question, system=system, trace=trace)
    else:  # the paper's C(q, O, h_t)
        request = PROMPTS.request(question, "panel_request", system=system, trace=trace, turn=panel.index,
                                  group=f"{panel.group_note}\n" if panel.group_note else "")
    # `speak`, not `consult`: the agent is fresh, so the request is the same, and a re-ask then
    # continues the same conversation (the Challenger sees what it wrote and why it must rewrite).
    agent, parsed = await RoleAgent.first_reply(session, name="challenger", role="challenger", system=request.system,
                                                content=request.text, model=Critique, step="critique", round=round,
                                                turn=turn, parts=parts, act=events.Critique())
    if parsed is None:
        return None
    event = agent.client.last_event
    if leaks(parsed.challenge, question.options):
        if event is not None:
            # Its text never reaches the team: the rewrite (or, failing that, a redaction) does.
            event.data.update(answer_leak=True, rewrite_requested=True, answer_redacted=True)
            event.parsed = screen(parsed, question.options)[0].model_dump()
        rewrite = await agent.speak(PROMPTS.render("rewrite"), Critique, step="critique:rewrite", round=round,
                                    turn=turn, act=events.Critique())
        if rewrite is not None:
            parsed, event = rewrite, agent.client.last_event
    screened, redacted = screen(parsed, question.options)
    if event is not None and redacted:
        event.data["answer_redacted"] = True
        event.parsed = screened.model_dump()
    return screened


@dataclass(frozen=True)
class PanelReview:
    """A panel's review: after its turn `index`; `group_note` when it is one of several panels."""

    index: int
    group_note: str | None = None
