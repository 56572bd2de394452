"""The panel's shared state: its members, the posts of the discussion, and how they are shown.

A member sees every post but its own (and an auxiliary recruit no brief); the Challenger reviews the
whole trace turn by turn; a bounded context window may drop earlier positions, never critiques or
briefs (`post_parts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.context import Part
from medpanel.agents.model.structured import AnswerReply, letters_of
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import Question
from medpanel.methods.panel.channels.knowledge import BriefResult
from medpanel.methods.panel.roles.selector import Specialist
from medpanel.methods.panel.settings import PanelSettings

PROMPTS = Prompts(__name__)


# Used only when the selector's reply is invalid twice: a panel must exist for the debate to run,
# and the fallback is recorded in the transcript. The later entries let several groups of one
# question (the calibrated backbone) still seat different fallback roles.
FALLBACK_TEAM = (
    Specialist(role="Internal medicine physician", expertise="Broad adult medicine and diagnosis."),
    Specialist(role="Clinical pharmacologist", expertise="Drugs, mechanisms and therapeutics."),
    Specialist(role="Emergency physician", expertise="Acute presentations and first management."),
    Specialist(role="Pathologist", expertise="Disease mechanisms and laboratory findings."),
    Specialist(role="General surgeon", expertise="Surgical conditions and their management."),
    Specialist(role="Family physician", expertise="Primary care, prevention and common conditions."),
)


@dataclass(frozen=True)
class Group:
    """One of several panels discussing the same question separately (the calibrated backbone's
    multi-group level). Its identity and the roles already seated elsewhere enter its requests, so
    it is a panel of its own and never a replay of another group."""

    index: int
    of: int
    seated: tuple[str, ...] = ()
    """Roles seated in earlier groups: this group's selector must choose others."""
    upfront: BriefResult | None = None
    shared_upfront: bool = False
    """True when the question's upfront brief was retrieved once for all groups (`upfront`)."""

    def note(self) -> str:
        return PROMPTS.render("group_note", index=self.index, of=self.of)


@dataclass
class Member:
    agent: RoleAgent
    spec: Specialist
    joined_turn: int = 0
    recruited: bool = False
    auxiliary: bool = False
    """Never receives a brief and does not post to the shared discussion (`-ind`, routed)."""
    assessor: bool = False
    """`-ind`: consulted once for a targeted assessment of its gap; takes no turns, casts no panel vote."""
    assessment: dict[str, Any] | None = None
    seen: int = 0
    """How many shared posts this member has already been shown."""
    last: tuple[str, ...] = ()
    last_text: str = ""


@dataclass
class Post:
    source: str
    text: str
    turn: int
    kind: str = "position"
    """position, critique or brief."""
    brief: BriefResult | None = None


@dataclass
class PanelState:
    question: Question
    session: QuestionSession
    settings: PanelSettings
    members: list[Member] = field(default_factory=list)
    posts: list[Post] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    """Every turn's positions, for cumulative support in the tie rule."""
    independent: bool = False
    assessors: bool = False
    """`-ind`: recruits give auxiliary assessments to the moderator instead of joining the discussion."""
    group: Group | None = None
    routed: bool = False
    focus: str | None = None
    """Routed coordination: a challenge the next turn must answer point by point."""
    weaknesses: int = 0
    """Critiques that found a material weakness."""
    routes: list[str] = field(default_factory=list)
    """Routed coordination: the channel each turn was routed to."""

    def taken(self) -> set[str]:
        return {m.agent.name for m in self.members}

    def roles(self) -> list[str]:
        return [m.spec.role for m in self.members]

    def discussants(self) -> list[Member]:
        """The members who take turns and vote (everyone but `-ind`'s auxiliary assessors)."""
        return [m for m in self.members if not m.assessor]


def _norm(role: str) -> str:
    return " ".join(role.lower().replace("-", " ").split()).removesuffix("s")


def unique_roles(candidates: list[Specialist], existing: list[str]) -> list[Specialist]:
    seen = {_norm(r) for r in existing}
    out = []
    for spec in candidates:
        key = _norm(spec.role)
        if key and key not in seen:
            seen.add(key)
            out.append(spec)
    return out


def _shown(p: Post) -> str:
    return p.text if p.kind == "brief" else f"[{p.source}] {p.text}"


def render_posts(posts: list[Post]) -> str:
    return "\n\n".join(_shown(p) for p in posts)


def render_trace(posts: list[Post]) -> str:
    """The whole shared history turn by turn, as the Challenger reviews it."""
    out: list[str] = []
    last: int | None = None
    for p in posts:  # in the order they were shared, so one turn's posts are together
        if p.turn != last:
            out.append(f"-- Turn {p.turn} --" if p.turn else "-- Before the discussion --")
            last = p.turn
        out.append(_shown(p))
    return "\n\n".join(out)


@dataclass(frozen=True)
class Review:
    """What the Challenger is shown of the panel: the paper's C(q, O, h_t)."""

    trace: str
    """The whole shared history turn by turn: positions, earlier critiques and briefs."""
    parts: list[Part]
    """The earlier positions, which a bounded context window may drop."""
    group_note: str | None
    """The group's identity when the panel is one of several on the question."""


def review(state: PanelState) -> Review:
    return Review(render_trace(state.posts), post_parts(state.posts),
                  state.group.note() if state.group is not None else None)


def post_parts(posts: list[Post]) -> list[Part]:
    """What a bounded context window may drop from a message that shows these posts: the positions.
    Critiques and briefs are never among them (agents.context)."""
    return [Part(_shown(p), f"turn {p.turn} position of {p.source}") for p in posts if p.kind == "position"]


def visible(member: Member, posts: list[Post]) -> list[Post]:
    """What a member is shown: not its own posts, and no brief if it is an auxiliary recruit."""
    return [p for p in posts if p.source != member.agent.name and not (member.auxiliary and p.kind == "brief")]


def deliver(member: Member, posts: list[Post]) -> None:
    """Record, on each brief's event, that this member received it."""
    for p in visible(member, posts):
        if p.brief is not None:
            p.brief.deliver([member.agent.name])


def position_text(member: Member, parsed: AnswerReply) -> str:
    return f"{parsed.reasoning}\nAnswer: {', '.join(letters_of(parsed))}"
