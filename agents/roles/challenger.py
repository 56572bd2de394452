"""The meta-level Challenger: reviews a reasoning trace and names its weakest point.

It is a fresh agent on every review (what it remembers of earlier turns is what the trace it is
given shows), and its critique is screened so that a challenge that names the answer never reaches
the team: a leaking challenge is re-asked once, and a rewrite that still leaks is redacted.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.context import Part
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import Question

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

# Words that make an option *the answer* ("(C) fits better", "B is the correct answer"). The
# lookahead keeps causal statements apart: "B is more likely to cause hypokalaemia" is an argument
# about a drug, not a verdict.
_VERDICT = (r"(?:better|best|correct|right|preferable|preferred|more\s+likely|most\s+likely|likeliest"
            r"|(?:the\s+)?answer|the\s+(?:best|correct|right|most\s+likely|likeliest)\s+(?:answer|option|choice)"
            r"|the\s+(?:diagnosis|cause))")
_VERDICT_END = (r"(?=\s*(?:$|[.,;:!?)\]]|(?:than|here|overall|answer|option|choice|diagnosis|explanation|with|given"
                r"|because|since|for|in)\b))")
_VERB = r"(?:fits|fit|matches|match|is|seems|looks|appears|would\s+be|must\s+be|should\s+be|remains)"
_CUE = (r"(?:(?:the\s+)?(?:answer|(?:correct|best|right)\s+(?:option|choice|answer))\s*(?:is|should\s+be|must\s+be"
        r"|would\s+be|=|:)|choose|select|pick|go\s+with|opt\s+for|switch\s+to|change\s+(?:the\s+|your\s+)?answer\s+to)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
REDACTED = "Re-examine the reasoning for the chosen option."
"""What is left of a challenge whose every sentence named an answer."""


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[()\[\].,:;!?'\"]", " ", text.lower()).split())


@functools.lru_cache(maxsize=256)
def _patterns(options: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], frozenset[str]]:
    """One pattern for an option set, and the normalised texts a whole challenge may not be.

    Letters are matched case-sensitively (the article "a" is no option) and never as a possessive
    ("option C's mechanism"); option texts case-insensitively, as whole words.
    """
    alts = []
    bare = set()
    for letter, text in options:
        alts.append(rf"(?i:(?:option|choice)\s+)?(?<![\w'’])\(?{re.escape(letter)}\)?(?![\w'’])")
        if text.strip():
            alts.append(rf"(?<!\w)(?i:{re.escape(text.strip())})(?!\w)")
            bare |= {_norm(text), _norm(f"{letter} {text}")}
        bare |= {_norm(letter), _norm(f"option {letter}"), _norm(f"answer {letter}"), _norm(f"answer is {letter}"),
                 _norm(f"the answer is {letter}")}
    alt = "(?:" + "|".join(alts) + ")"
    pattern = re.compile(rf"(?i:\b{_CUE})\s*{alt}|{alt}\s+(?i:{_VERB}\s+(?:(?:a|the)\s+)?{_VERDICT}){_VERDICT_END}")
    return pattern, frozenset(bare)


def leaks(text: str, options: dict[str, str]) -> bool:
    """Does this text name an option as the answer, or consist of nothing but an option?"""
    pattern, bare = _patterns(tuple(options.items()))
    return _norm(text) in bare or bool(pattern.search(text))


def screen(critique: Critique, options: dict[str, str]) -> tuple[Critique, bool]:
    """Remove the sentences of the challenge that state an answer; report whether any did."""
    if not leaks(critique.challenge, options):
        return critique, False
    sentences = _SENTENCE.split(critique.challenge)
    kept = [s for s in sentences if not leaks(s, options)]
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
                                                turn=turn, parts=parts)
    if parsed is None:
        return None
    event = agent.client.last_event
    if leaks(parsed.challenge, question.options):
        if event is not None:
            # Its text never reaches the team: the rewrite (or, failing that, a redaction) does.
            event.data.update(answer_leak=True, rewrite_requested=True, answer_redacted=True)
            event.parsed = screen(parsed, question.options)[0].model_dump()
        rewrite = await agent.speak(PROMPTS.render("rewrite"), Critique, step="critique:rewrite", round=round,
                                    turn=turn)
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
