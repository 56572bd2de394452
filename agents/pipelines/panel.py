"""The multi-specialist MDT panel with a meta-level Challenger and specialist recruitment.

The paper's multi-specialist backbone (section 3, appendix A): two question-conditioned
specialists discuss for `rounds` x `turns_per_round` turns. A turn is one cycle in which every
active agent responds; within a turn agents answer the same state (the posts up to the end of the
previous turn), so speaking order cannot bias a turn. After each turn but the last:

1. `c: 1` - the Challenger reviews the turn's positions. A material weakness is appended to the
   shared history (so every agent sees it next turn) before any recruitment decision.
2. `r: 1` - every active agent is asked whether a perspective is missing: before any critique
   exists (`c0r1`, self-triggered) or after it (`c1r1`, Challenger-informed). If at least one says
   yes, a recruiter proposes non-duplicate roles; at most `max_recruit_per_turn` join per turn,
   `max_recruit_total` per question and the panel never exceeds `max_panel`. Recruits first hear
   the trajectory so far.

3. `k: 1` - knowledge recruitment between turns: the Knowledge Gate sees the turn's positions
   and (with `c: 1`) the critique, and may retrieve; the curator's brief is posted to the shared
   history, after the critique and before the recruitment decision. `timing: upfront` instead
   retrieves once before the first turn with the question as the query.

Channel coordination when both channels are on: `c1r1k1` (naive) - recruits hear the whole
trajectory, briefs included. `c1r1k1-ind` (independent, paper section 3.2 and A.2) - a recruit
never enters the evidence-informed discussion: it is consulted once, on joining, for a targeted
assessment of the gap that summoned it (the Challenger's critique and what the panel said was
missing; never a brief, never the panel's posts), and the moderator decides from the panel's votes
and these auxiliary assessments (`moderate_with_auxiliary`, README: "Independent coordination").

Routed coordination (`c1-routed`, beyond the paper): the Challenger's gap type picks one channel
per turn, recorded as a `route` note: insufficient evidence -> the Knowledge Gate and retrieval;
missing expertise -> specialist recruitment; a logical inconsistency, an unresolved option conflict
or a missing differential -> a focused critique round (the next turn must answer the challenge
point by point); no material weakness -> nothing. Recruits never receive a brief (as in `-ind`),
and the moderator counts agents who saw the same briefs as one correlated block (see `moderate`).

The final answer is the majority of the active agents' last valid letters; a tie goes to the
moderator model, which may choose only among the tied letters (README: "Tie rule").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, create_model

from medpanel.agents.channels.knowledge import BriefResult, KnowledgeChannel, KnowledgeSettings, prepare
from medpanel.agents.model.agent import RoleAgent, agent_name, format_question, render
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.context import Part
from medpanel.agents.model.structured import answer_model, letters_of, letters_type
from medpanel.agents.pipelines.base import Outcome, register
from medpanel.agents.roles.challenger import challenge
from medpanel.agents.schemas import Critique, RecruitCheck, Specialist, TeamChoice
from medpanel.agents.types import Condition, Question, TranscriptEvent

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
        return render("group_note", index=self.index, of=self.of)


class PanelSettings(KnowledgeSettings):
    rounds: int = Field(default=3, ge=1)
    turns_per_round: int = Field(default=3, ge=1)
    initial_specialists: int = Field(default=2, ge=1, le=5)
    max_recruit_per_turn: int = Field(default=2, ge=0)
    max_recruit_total: int = Field(default=3, ge=0)
    max_panel: int = Field(default=5, ge=1)
    early_stop: bool = False
    """Stop when every agent agrees and the Challenger (if on) finds no weakness."""
    challenger_depth: Literal["light", "standard", "deep"] = "standard"
    """How hard the Challenger looks (the calibrated backbone sets it from the triage level)."""
    k_source: Literal["corpus", "clear"] = "corpus"
    """The knowledge channel: a curator's brief over one corpus, or CLEAR's cross-source adjudication
    of panel, corpus and web evidence for the gap (`clear`)."""
    self_assessment: bool = False
    """The paper's Table 2B diagnostic: with `r: 1`, ask the initial panel only once (after its
    first turn) whether another agent is needed, instead of after every turn."""


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

    def taken(self) -> set[str]:
        return {m.agent.name for m in self.members}

    def roles(self) -> list[str]:
        return [m.spec.role for m in self.members]

    def discussants(self) -> list[Member]:
        """The members who take turns and vote (everyone but `-ind`'s auxiliary assessors)."""
        return [m for m in self.members if not m.assessor]


def _norm(role: str) -> str:
    return " ".join(role.lower().replace("-", " ").split()).removesuffix("s")


def _unique_roles(candidates: list[Specialist], existing: list[str]) -> list[Specialist]:
    seen = {_norm(r) for r in existing}
    out = []
    for spec in candidates:
        key = _norm(spec.role)
        if key and key not in seen:
            seen.add(key)
            out.append(spec)
    return out


def add_member(state: PanelState, spec: Specialist, *, turn: int, recruited: bool, assessor: bool = False) -> Member:
    name = agent_name(spec.role, state.taken())
    system = render("auxiliary_specialist" if assessor else "specialist", role=spec.role, expertise=spec.expertise)
    if state.group is not None:
        system = f"{system}\n{state.group.note()}"
    agent = RoleAgent(state.session, name=name, role="specialist", system_message=system)
    agent.label = spec.role
    member = Member(agent=agent, spec=spec, joined_turn=turn, recruited=recruited, auxiliary=assessor,
                    assessor=assessor)
    state.members.append(member)
    return member


async def select_team(state: PanelState) -> list[Specialist]:
    n = state.settings.initial_specialists
    group = state.group
    seated = list(group.seated) if group is not None else []
    selector = RoleAgent(state.session, name="selector", role="selector", system_message=render("selector"))
    request = render("select_request", question=format_question(state.question), n=n)
    if group is not None:
        request += "\n" + render("select_group", note=group.note(),
                                 seated=", ".join(seated) if seated else "none yet")
    choice = await selector.consult(request, TeamChoice, step="select_specialists")
    team = _unique_roles(choice.specialists, seated) if isinstance(choice, TeamChoice) else []
    if len(team) < n:
        fill = _unique_roles(list(FALLBACK_TEAM), seated + [s.role for s in team])
        if len(team) + len(fill) < n:  # every fallback role is seated elsewhere: repeat one, recorded
            fill += _unique_roles(list(FALLBACK_TEAM), [s.role for s in team + fill])
        team += fill
        state.session.record(TranscriptEvent(kind="note", role="pipeline", agent="selector", step="fallback_team",
                                             content="Selector gave fewer distinct specialists than needed; "
                                                     "filled from the fallback team.",
                                             data={"seated_elsewhere": seated}))
    return team[:n]


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


def position_text(member: Member, parsed: Any) -> str:
    return f"{parsed.reasoning}\nAnswer: {', '.join(letters_of(parsed))}"


async def run_turn(state: PanelState, answer_type: Any, *, rnd: int, turn: int, index: int) -> None:
    """Every active member answers the same state; their posts are shared after the turn."""
    new_posts: list[Post] = []
    for member in state.discussants():
        unseen = visible(member, state.posts[member.seen :])
        if index == 1 and not member.recruited:
            text = format_question(state.question)
            if unseen:  # an upfront brief comes with the question
                text = f"{render_posts(unseen)}\n\n{text}"
        else:
            text = render("turn_request", posts=render_posts(unseen) or "(no new posts)", round=rnd, turn=turn)
        if state.focus and not member.auxiliary:
            text = f"{text}\n\n{render('focused_round', challenge=state.focus)}"
        deliver(member, state.posts[member.seen :])
        member.seen = len(state.posts)
        parsed = await member.agent.speak(text, answer_type, step="turn", round=rnd, turn=turn,
                                          parts=post_parts(unseen))
        if parsed is not None:
            member.last = letters_of(parsed)
            member.last_text = position_text(member, parsed)
            post = Post(member.agent.name, f"({member.spec.role}) {member.last_text}", index)
        else:
            post = Post(member.agent.name, f"({member.spec.role}) [no valid answer this turn]", index)
        if not member.auxiliary:
            new_posts.append(post)
    state.posts.extend(new_posts)
    state.history.append({m.agent.name: m.last for m in state.discussants()})
    state.focus = None


async def recruit(state: PanelState, critique: Critique | None, *, rnd: int, turn: int, index: int) -> list[str]:
    s = state.settings
    room = min(s.max_recruit_per_turn, s.max_panel - len(state.members),
               s.max_recruit_total - sum(m.recruited for m in state.members))
    trigger = "challenger" if critique is not None and critique.material_weakness else "self"
    if room <= 0:
        # The panel is full (or the run's recruitment budget is spent): asking would change nothing.
        state.session.record(TranscriptEvent(
            kind="note", role="pipeline", agent="recruiter", step="recruitment", round=rnd, turn=turn,
            content="no recruitment: panel or recruitment limit reached",
            data={"trigger": trigger, "checks": [], "flagged": 0, "room": 0, "recruited": [],
                  "panel": state.roles()}))
        return []
    checks: list[dict[str, Any]] = []
    context = (f"The Challenger raised: [{critique.gap_type}] {critique.challenge}\n"
               if critique is not None and critique.material_weakness else "")
    for member in state.discussants():
        check = await member.agent.consult(render("recruit_check", panel=", ".join(state.roles()), context=context),
                                           RecruitCheck, step="recruit_check", round=rnd, turn=turn)
        if isinstance(check, RecruitCheck):
            checks.append({"agent": member.agent.name, "needed": check.needed, "specialty": check.specialty,
                           "reason": check.reason})
    flagged = [c for c in checks if c["needed"]]
    added: list[str] = []
    if flagged and room > 0:
        recruiter = RoleAgent(state.session, name="recruiter", role="recruiter", system_message=render("recruiter"))
        needs = "\n".join(f"- {c['specialty'] or 'unspecified'}: {c['reason']}" for c in flagged)
        crit = f"The Challenger's critique: {critique.challenge}\n" if context and critique else ""
        proposal = await recruiter.consult(
            render("recruit_request", question=format_question(state.question), panel=", ".join(state.roles()),
                   needs=needs, critique=crit, k=room),
            TeamChoice, step="recruit", round=rnd, turn=turn)
        if isinstance(proposal, TeamChoice):
            gap = "\n".join(([f"The Challenger's critique: [{critique.gap_type}] {critique.challenge}"]
                              if context and critique else [])
                             + [f"What the team said was missing:\n{needs}"])
            for spec in _unique_roles(proposal.specialists, state.roles())[:room]:
                member = add_member(state, spec, turn=index, recruited=True, assessor=state.assessors)
                member.auxiliary = state.independent
                added.append(spec.role)
                if member.assessor:
                    await assess(state, member, gap, rnd=rnd, turn=turn, index=index)
                    continue
                shown = visible(member, state.posts)
                trajectory = f"{format_question(state.question)}\n\nThe discussion so far:\n{render_posts(shown)}"
                await member.agent.hear(trajectory, source="moderator", parts=post_parts(shown))
                deliver(member, state.posts)
                member.seen = len(state.posts)
    state.session.record(TranscriptEvent(
        kind="note", role="pipeline", agent="recruiter", step="recruitment", round=rnd, turn=turn,
        content=f"recruited: {', '.join(added)}" if added else "no recruitment",
        data={"trigger": trigger, "checks": checks, "flagged": len(flagged),
              "room": room, "recruited": added, "panel": state.roles()}))
    return added


async def assess(state: PanelState, member: Member, gap: str, *, rnd: int, turn: int, index: int) -> None:
    """`-ind`: the recruit's one targeted assessment of the gap that summoned it, for the moderator.

    It sees the question and the gap (the critique, what the panel said was missing), not the
    discussion, so it stays independent of the evidence-informed shared history and its brief.
    """
    q = state.question
    model = answer_model(q.letters, multi=q.multi_answer, name="AuxiliaryAssessment")
    parsed = await member.agent.speak(render("auxiliary_request", question=format_question(q), role=member.spec.role,
                                             gap=gap), model, step="auxiliary_assessment", round=rnd, turn=turn)
    member.assessment = {"agent": member.agent.name, "role": member.spec.role, "turn": index, "gap": gap,
                         "valid": parsed is not None, "answer": list(letters_of(parsed)) if parsed else None,
                         "reasoning": getattr(parsed, "reasoning", None)}
    if parsed is not None:
        member.last = letters_of(parsed)
        member.last_text = position_text(member, parsed)


AUXILIARY_RULE = "auxiliary-informed moderator"


async def moderate_with_auxiliary(state: PanelState) -> tuple[tuple[str, ...], dict[str, Any]]:
    """`-ind`'s decision: the panel's votes plus the auxiliary assessments (README: "Independent
    coordination").

    1. No valid assessment: the panel's usual vote (majority, tie-break, support).
    2. The candidates are the panel's leading position(s) and every assessment's answer. One
       candidate: it stands (panel and assessors agree), no call.
    3. Otherwise a moderator call, whose answer type admits only the candidates, decides.
    4. A moderator reply invalid twice: the pooled majority of panel votes and assessments (one
       each); a tie there goes to the most support over all turns (panel history plus
       assessments); still tied: `invalid`. Never a default letter.
    """
    panel = {m.agent.name: ",".join(m.last) for m in state.discussants() if m.last}
    assessments = [m.assessment for m in state.members if m.assessor and m.assessment is not None]
    valid = [a for a in assessments if a["valid"]]
    aux_votes = {a["agent"]: ",".join(a["answer"]) for a in valid}
    inputs: dict[str, Any] = {"panel_votes": panel, "auxiliary": assessments}
    base = {"auxiliary": [m.agent.name for m in state.members if m.assessor],
            "auxiliary_invalid": len(assessments) - len(valid), "inputs": inputs}
    if not valid:
        answer, usual = await moderate(state, skip_auxiliary=True)
        return answer, {**usual, **base, "auxiliary_rule": f"{AUXILIARY_RULE}: no valid assessment, panel vote",
                        "outcome": {"answer": list(answer), "decided_by": usual["rule"]}}
    counts = Counter(panel.values())
    leaders = sorted(k for k, v in counts.items() if v == max(counts.values())) if counts else []
    candidates = sorted(set(leaders) | set(aux_votes.values()))
    inputs["candidates"] = candidates
    record: dict[str, Any] = {"rule": AUXILIARY_RULE, "votes": {**panel, **aux_votes}, "counts": dict(counts),
                              "auxiliary_counts": dict(Counter(aux_votes.values())), **base}

    def done(answer: tuple[str, ...], decided_by: str, **extra: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
        return answer, {**record, **extra, "outcome": {"answer": list(answer), "decided_by": decided_by}}

    if len(candidates) == 1:
        return done(tuple(candidates[0].split(",")), "agreement")
    q = state.question
    model = create_model("AuxiliaryDecision", reasoning=(str, Field(description="Brief reasoning.")),
                         answer=(letters_type(candidates), Field(description="One of the candidate options.")))
    moderator = RoleAgent(state.session, name="moderator", role="moderator",
                          system_message=render("auxiliary_moderator"))
    positions = "\n\n".join(f"[{m.spec.role}] {m.last_text}" for m in state.discussants() if m.last) or "(none valid)"
    notes = "\n\n".join(f"[{a['role']}, consulted on]\n{a['gap']}\n[Assessment] {a['reasoning']}\n"
                         f"Answer: {', '.join(a['answer'])}" for a in valid)
    parsed = await moderator.consult(render("auxiliary_moderator_request", question=format_question(q),
                                            positions=positions, assessments=notes, candidates=" / ".join(candidates)),
                                     model, step="auxiliary_moderation")
    if parsed is not None:
        return done(tuple(str(parsed.answer).split(",")), "moderator")
    pooled = Counter([*panel.values(), *aux_votes.values()])
    top = max(pooled.values())
    tied = sorted(k for k, v in pooled.items() if v == top)
    if len(tied) == 1:
        return done(tuple(tied[0].split(",")), "fallback: pooled majority", pooled=dict(pooled))
    support = Counter(",".join(v) for turn in state.history for v in turn.values() if v) + Counter(aux_votes.values())
    ranked = sorted(tied, key=lambda k: -support[k])
    if support[ranked[0]] > support[ranked[1]]:
        return done(tuple(ranked[0].split(",")), "fallback: pooled majority, tie -> cumulative support",
                    pooled=dict(pooled), support=dict(support))
    return done((), "fallback: unresolved tie", pooled=dict(pooled), support=dict(support))


def information_blocks(state: PanelState) -> dict[str, list[str]]:
    """Agents grouped by the set of briefs they received: each group saw the same evidence."""
    briefs = [p.brief for p in state.posts if p.brief is not None]
    blocks: dict[str, list[str]] = {}
    for m in state.members:
        seen = [str(i) for i, b in enumerate(briefs, 1) if m.agent.name in b.received_by]
        blocks.setdefault("briefs:" + (",".join(seen) or "none"), []).append(m.agent.name)
    return blocks


def block_counts(state: PanelState, votes: dict[str, str]) -> tuple[Counter[str], dict[str, Any]]:
    """Each information block casts one vote (its own majority; a block split evenly abstains), so
    agents who read the same brief do not count as independent evidence for the same letter."""
    out: Counter[str] = Counter()
    record: dict[str, Any] = {}
    for block, names in information_blocks(state).items():
        inner = Counter(votes[n] for n in names if n in votes)
        if not inner:
            continue
        top = max(inner.values())
        leaders = [k for k, v in inner.items() if v == top]
        record[block] = {"members": names, "vote": leaders[0] if len(leaders) == 1 else None}
        if len(leaders) == 1:
            out[leaders[0]] += 1
    return out, record


async def moderate(state: PanelState, *, skip_auxiliary: bool = False) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Majority vote over last valid letters; ties go to the moderator model, then to support.

    Under routed coordination the majority is over information blocks first; raw counts break a
    tie between blocks. Under `-ind` the auxiliary rule decides (`moderate_with_auxiliary`).
    """
    if state.assessors and not skip_auxiliary:
        return await moderate_with_auxiliary(state)
    votes = {m.agent.name: ",".join(m.last) for m in state.discussants() if m.last}
    record: dict[str, Any] = {"votes": votes, "rule": "majority",
                              "auxiliary": [m.agent.name for m in state.members if m.auxiliary]}
    if not votes:
        return (), {**record, "rule": "no valid votes"}
    counts = Counter(votes.values())
    record["counts"] = dict(counts)
    if state.routed:
        blocks, block_record = block_counts(state, votes)
        record["blocks"] = block_record
        record["block_counts"] = dict(blocks)
        if blocks:
            top_b = max(blocks.values())
            leaders = sorted(k for k, v in blocks.items() if v == top_b)
            if len(leaders) == 1:
                return tuple(leaders[0].split(",")), {**record, "rule": "majority of information blocks"}
            # blocks tie: the raw counts among the tied block leaders decide, then the usual rule
            counts = Counter({k: counts[k] for k in leaders})
            record["rule"] = "blocks tied -> raw majority"
    top = max(counts.values())
    tied = sorted(k for k, v in counts.items() if v == top)
    if len(tied) == 1:
        return tuple(tied[0].split(",")), record
    record["tied"] = tied
    q = state.question
    # The moderator may only pick among the tied positions (a position may be a set of letters
    # for multi-answer items): the answer type is built from them.
    model = create_model("TieBreak", reasoning=(str, Field(description="Brief reasoning.")),
                         answer=(letters_type(tied), Field(description="One of the tied options.")))
    moderator = RoleAgent(state.session, name="moderator", role="moderator", system_message=render("moderator"))
    positions = "\n\n".join(f"[{m.spec.role}] {m.last_text}" for m in state.discussants() if m.last)
    parsed = await moderator.consult(render("tiebreak_request", question=format_question(q),
                                            tied=" / ".join(tied), positions=positions), model, step="tie_break")
    if parsed is not None:
        return tuple(str(parsed.answer).split(",")), {**record, "rule": "moderator"}
    # The moderator failed twice: the tied position with the most support over all turns wins.
    support = Counter(",".join(v) for turn in state.history for v in turn.values() if v)
    ranked = sorted(tied, key=lambda k: -support[k])
    if support[ranked[0]] > support[ranked[1]]:
        return tuple(ranked[0].split(",")), {**record, "rule": "cumulative support", "support": dict(support)}
    return (), {**record, "rule": "unresolved tie"}


ROUTES = {
    "insufficient_evidence": "retrieve",
    "missing_expertise": "recruit",
    "logical_inconsistency": "critique_round",
    "unresolved_option_conflict": "critique_round",
    "missing_differential": "critique_round",
}


def route_for(critique: Critique | None) -> str:
    """The routed controller's decision for one turn."""
    if critique is None or not critique.material_weakness or critique.gap_type == "none":
        return "none"
    return ROUTES.get(critique.gap_type, "critique_round")


def panel_position(state: PanelState) -> tuple[str, ...] | None:
    """The panel's current majority letter set, or None when it is split evenly."""
    counts = Counter(m.last for m in state.members if m.last and not m.auxiliary)
    if not counts:
        return None
    top = max(counts.values())
    leaders = [k for k, v in counts.items() if v == top]
    return leaders[0] if len(leaders) == 1 else None


class PanelPipeline:
    settings_model = PanelSettings
    flags = ("c", "r", "k")
    variants = ("ind", "routed", "clear")
    """`-ind` independent coordination, `c1-routed` routed coordination, `-clear` CLEAR as the
    evidence channel (the same as `settings.k_source: clear`, as a condition of its own)."""

    def prepare(self, conditions: list[Condition], settings: PanelSettings) -> None:
        if any(c.on("k") or c.flags.get("variant") == "routed" for c in conditions):
            prepare(settings)
        if any(c.on("k") and (settings.k_source == "clear" or c.flags.get("variant") == "clear") for c in conditions):
            from medpanel.agents.channels.clear import prepare_channel

            prepare_channel(settings)

    async def __call__(self, question: Question, condition: Condition, session: QuestionSession,
                       settings: Any) -> Outcome:
        return await self.discuss(question, condition, session, settings)

    async def discuss(self, question: Question, condition: Condition, session: QuestionSession,
                      settings: PanelSettings, *, group: Group | None = None) -> Outcome:
        """One panel's discussion; `group` when it is one of several panels on the same question."""
        s = settings
        routed = condition.flags.get("variant") == "routed"
        if routed and not condition.on("c"):
            raise ValueError("routed coordination routes on the Challenger's diagnosis: use c1-routed")
        ind = condition.flags.get("variant") == "ind"
        state = PanelState(question=question, session=session, settings=s, group=group,
                           independent=ind or routed, assessors=ind, routed=routed)
        channel: KnowledgeChannel | None = None
        if condition.on("k") or routed:
            if s.k_source == "clear" or condition.flags.get("variant") == "clear":
                from medpanel.agents.channels.clear import ClearChannel

                channel = ClearChannel(session, question, s)
            else:
                channel = KnowledgeChannel(session, question, s)
        routes: list[str] = []
        for spec in await select_team(state):
            add_member(state, spec, turn=1, recruited=False)
        if channel is not None and s.timing == "upfront":
            if group is not None and group.shared_upfront:
                brief = group.upfront  # retrieved once for every group of the question
                if brief is not None:
                    channel.results.append(brief)
            else:
                brief = await channel.upfront()
            if brief is not None:
                state.posts.append(Post("evidence_curator", brief.text(), 0, kind="brief", brief=brief))
        answer_type = answer_model(question.letters, multi=question.multi_answer)
        total = s.rounds * s.turns_per_round
        recruited: list[str] = []
        weaknesses = 0
        stopped_early = False
        for index in range(1, total + 1):
            rnd, turn = (index - 1) // s.turns_per_round + 1, (index - 1) % s.turns_per_round + 1
            await run_turn(state, answer_type, rnd=rnd, turn=turn, index=index)
            if index == total:
                break  # an intervention after the last turn could not change any answer
            critique = None
            if condition.on("c"):
                # The paper's C(q, O, h_t): the accumulated trace, the Challenger's own earlier
                # critiques and the briefs included, so it reviews the debate and does not repeat itself.
                trace = render_trace(state.posts)
                request = render("panel_critique_request", question=format_question(question), trace=trace,
                                 turn=index, group=f"{state.group.note()}\n" if state.group else "")
                critique = await challenge(session, question, trace, round=rnd, turn=turn, depth=s.challenger_depth,
                                           request=request, parts=post_parts(state.posts))
                if critique is not None and critique.material_weakness:
                    weaknesses += 1
                    state.posts.append(Post("challenger", f"[Challenge: {critique.gap_type}] {critique.challenge}",
                                            index, kind="critique"))
            route = route_for(critique) if routed else None
            if routed:
                routes.append(route or "none")
                session.record(TranscriptEvent(
                    kind="note", role="pipeline", agent="router", step="route", round=rnd, turn=turn,
                    content=f"{critique.gap_type if critique else 'no critique'} -> {route}",
                    data={"gap_type": critique.gap_type if critique else None, "route": route}))
            if channel is not None and s.timing != "upfront" and (not routed or route == "retrieve"):
                trace = render_posts([p for p in state.posts if p.turn == index and p.kind == "position"])
                blind = s.timing == "between_blind" or not condition.on("c")
                if isinstance(channel, KnowledgeChannel) and hasattr(channel, "panel_answer"):
                    channel.panel_answer = panel_position(state)
                brief = await channel.between(trace, critique, blind=blind, round=rnd, turn=turn)
                if brief is not None:
                    state.posts.append(Post("evidence_curator", brief.text(), index, kind="brief", brief=brief))
            if routed and route == "critique_round" and critique is not None:
                state.focus = f"[{critique.gap_type}] {critique.challenge}"
            if (condition.on("r") and (index == 1 or not s.self_assessment)) or route == "recruit":
                recruited += await recruit(state, critique, rnd=rnd, turn=turn, index=index)
            panel = state.discussants()
            agreed = len({m.last for m in panel}) == 1 and all(m.last for m in panel)
            if s.early_stop and agreed and not (critique and critique.material_weakness):
                stopped_early = True
                session.record(TranscriptEvent(kind="note", role="pipeline", agent="moderator", step="early_stop",
                                               round=rnd, turn=turn, content="All agents agree; discussion ends."))
                break
        answer, vote = await moderate(state)
        session.record(TranscriptEvent(kind="vote", role="moderator", agent="moderator", step="final",
                                       content=",".join(answer) or "invalid", data=vote))
        summary = {
            "recruited": len(recruited),
            "recruited_roles": recruited,
            "initial_panel": [m.spec.role for m in state.members if not m.recruited],
            "recruit_names": [m.agent.name for m in state.members if m.recruited],
            "final_panel_size": len(state.members),
            "critiques_with_weakness": weaknesses,
            "stopped_early": stopped_early,
            "tie": "tied" in vote,
        }
        if s.self_assessment:
            summary["self_assessment"] = True
        if channel is not None:
            summary.update(channel.summary())
            summary["independent"] = state.independent
        if state.assessors:
            summary["auxiliary_assessments"] = sum(1 for m in state.members if m.assessment and m.assessment["valid"])
            summary["auxiliary_invalid"] = sum(1 for m in state.members if m.assessment and not m.assessment["valid"])
        if routed:
            summary["routes"] = routes
        return Outcome(answer=answer, invalid=not answer, summary=summary)


@register("panel")
def _factory() -> PanelPipeline:
    return PanelPipeline()
