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
trajectory, briefs included. `c1r1k1-ind` (independent) - recruits never receive a brief; they
see the discussion without it and answer on their own, as auxiliary assessments for the
moderator's vote, without posting into the evidence-informed discussion.

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

from medpanel.agents.challenger import challenge
from medpanel.agents.client import QuestionSession
from medpanel.agents.knowledge import BriefResult, KnowledgeChannel, KnowledgeSettings, prepare
from medpanel.agents.pipelines.base import Outcome, register
from medpanel.agents.roles import RoleAgent, agent_name, format_question, render
from medpanel.agents.schemas import Critique, RecruitCheck, Specialist, TeamChoice
from medpanel.agents.structured import answer_model, letters_of, letters_type
from medpanel.agents.types import Condition, Question, TranscriptEvent

# Used only when the selector's reply is invalid twice: a panel must exist for the debate to run,
# and the fallback is recorded in the transcript.
FALLBACK_TEAM = (
    Specialist(role="Internal medicine physician", expertise="Broad adult medicine and diagnosis."),
    Specialist(role="Clinical pharmacologist", expertise="Drugs, mechanisms and therapeutics."),
)


class PanelSettings(KnowledgeSettings):
    rounds: int = Field(default=3, ge=1)
    turns_per_round: int = Field(default=3, ge=1)
    initial_specialists: int = Field(default=2, ge=1, le=5)
    max_recruit_per_turn: int = Field(default=2, ge=0)
    max_recruit_total: int = Field(default=3, ge=0)
    max_panel: int = Field(default=5, ge=1)
    context_head: int = Field(default=2, ge=1)
    """Messages kept from the start of each agent's context (the question and its first answer)."""
    context_tail: int = Field(default=10, ge=2)
    """Newest messages kept; older middle turns are dropped so small models stay in context."""
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
    """Independent coordination: never receives a brief and does not post to the shared discussion."""
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
    routed: bool = False
    focus: str | None = None
    """Routed coordination: a challenge the next turn must answer point by point."""

    def taken(self) -> set[str]:
        return {m.agent.name for m in self.members}

    def roles(self) -> list[str]:
        return [m.spec.role for m in self.members]


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


def add_member(state: PanelState, spec: Specialist, *, turn: int, recruited: bool) -> Member:
    name = agent_name(spec.role, state.taken())
    window = (state.settings.context_head, state.settings.context_tail)
    agent = RoleAgent(state.session, name=name, role="specialist",
                      system_message=render("specialist", role=spec.role, expertise=spec.expertise),
                      window=window)
    agent.label = spec.role
    member = Member(agent=agent, spec=spec, joined_turn=turn, recruited=recruited)
    state.members.append(member)
    return member


async def select_team(state: PanelState) -> list[Specialist]:
    n = state.settings.initial_specialists
    selector = RoleAgent(state.session, name="selector", role="selector", system_message=render("selector"))
    choice = await selector.consult(render("select_request", question=format_question(state.question), n=n),
                                    TeamChoice, step="select_specialists")
    team = _unique_roles(choice.specialists, []) if isinstance(choice, TeamChoice) else []
    if len(team) < n:
        team += _unique_roles(list(FALLBACK_TEAM), [s.role for s in team])
        state.session.record(TranscriptEvent(kind="note", role="pipeline", agent="selector", step="fallback_team",
                                             content="Selector gave fewer distinct specialists than needed; "
                                                     "filled from the fallback team."))
    return team[:n]


def render_posts(posts: list[Post]) -> str:
    return "\n\n".join(p.text if p.kind == "brief" else f"[{p.source}] {p.text}" for p in posts)


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
    for member in list(state.members):
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
        parsed = await member.agent.speak(text, answer_type, step="turn", round=rnd, turn=turn)
        if parsed is not None:
            member.last = letters_of(parsed)
            member.last_text = position_text(member, parsed)
            post = Post(member.agent.name, f"({member.spec.role}) {member.last_text}", index)
        else:
            post = Post(member.agent.name, f"({member.spec.role}) [no valid answer this turn]", index)
        if not member.auxiliary:
            new_posts.append(post)
    state.posts.extend(new_posts)
    state.history.append({m.agent.name: m.last for m in state.members})
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
    for member in list(state.members):
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
            for spec in _unique_roles(proposal.specialists, state.roles())[:room]:
                member = add_member(state, spec, turn=index, recruited=True)
                member.auxiliary = state.independent
                shown = visible(member, state.posts)
                trajectory = f"{format_question(state.question)}\n\nThe discussion so far:\n{render_posts(shown)}"
                await member.agent.hear(trajectory, source="moderator")
                deliver(member, state.posts)
                member.seen = len(state.posts)
                added.append(spec.role)
    state.session.record(TranscriptEvent(
        kind="note", role="pipeline", agent="recruiter", step="recruitment", round=rnd, turn=turn,
        content=f"recruited: {', '.join(added)}" if added else "no recruitment",
        data={"trigger": trigger, "checks": checks, "flagged": len(flagged),
              "room": room, "recruited": added, "panel": state.roles()}))
    return added


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


async def moderate(state: PanelState) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Majority vote over last valid letters; ties go to the moderator model, then to support.

    Under routed coordination the majority is over information blocks first; raw counts break a
    tie between blocks.
    """
    votes = {m.agent.name: ",".join(m.last) for m in state.members if m.last}
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
    positions = "\n\n".join(f"[{m.spec.role}] {m.last_text}" for m in state.members if m.last)
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
            from medpanel.agents.clear_channel import prepare_channel

            prepare_channel(settings)

    async def __call__(self, question: Question, condition: Condition, session: QuestionSession,
                       settings: Any) -> Outcome:
        s: PanelSettings = settings
        routed = condition.flags.get("variant") == "routed"
        if routed and not condition.on("c"):
            raise ValueError("routed coordination routes on the Challenger's diagnosis: use c1-routed")
        state = PanelState(question=question, session=session, settings=s,
                           independent=condition.flags.get("variant") == "ind" or routed, routed=routed)
        channel: KnowledgeChannel | None = None
        if condition.on("k") or routed:
            if s.k_source == "clear" or condition.flags.get("variant") == "clear":
                from medpanel.agents.clear_channel import ClearChannel

                channel = ClearChannel(session, question, s)
            else:
                channel = KnowledgeChannel(session, question, s)
        routes: list[str] = []
        for spec in await select_team(state):
            add_member(state, spec, turn=1, recruited=False)
        if channel is not None and s.timing == "upfront":
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
                trace = render_posts([p for p in state.posts if p.turn == index])
                critique = await challenge(session, question, trace, round=rnd, turn=turn, depth=s.challenger_depth)
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
            agreed = len({m.last for m in state.members}) == 1 and all(m.last for m in state.members)
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
        if routed:
            summary["routes"] = routes
        return Outcome(answer=answer, invalid=not answer, summary=summary)


@register("panel")
def _factory() -> PanelPipeline:
    return PanelPipeline()
