"""The panel's decision: majority over the last valid letters, the tie rule, routed coordination's
information blocks, and independent coordination's auxiliary-informed moderator."""

from __future__ import annotations

from collections import Counter
from typing import Any

from medpanel.methods.panel.roles import moderator
from medpanel.methods.panel.state import PanelState

AUXILIARY_RULE = "auxiliary-informed moderator"


async def moderate_with_auxiliary(state: PanelState) -> tuple[tuple[str, ...], dict[str, Any]]:
    """`-ind`'s decision: the panel's votes plus the auxiliary assessments (docs/methods/panel.md: "Independent
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
    positions = "\n\n".join(f"[{m.spec.role}] {m.last_text}" for m in state.discussants() if m.last) or "(none valid)"
    notes = "\n\n".join(f"[{a['role']}, consulted on]\n{a['gap']}\n[Assessment] {a['reasoning']}\n"
                         f"Answer: {', '.join(a['answer'])}" for a in valid)
    chosen = await moderator.weigh_assessments(state.session, state.question, candidates, positions=positions,
                                               assessments=notes)
    if chosen is not None:
        return done(tuple(chosen.split(",")), "moderator")
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


def block_counts(state: PanelState, votes: dict[str, str]) -> tuple[Counter[str], dict[str, object]]:
    """Each information block casts one vote (its own majority; a block split evenly abstains), so
    agents who read the same brief do not count as independent evidence for the same letter."""
    out: Counter[str] = Counter()
    record: dict[str, object] = {}
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
    # The moderator may only pick among the tied positions (a position may be a set of letters
    # for multi-answer items): its answer type is built from them.
    positions = "\n\n".join(f"[{m.spec.role}] {m.last_text}" for m in state.discussants() if m.last)
    chosen = await moderator.tie_break(state.session, state.question, tied, positions)
    if chosen is not None:
        return tuple(chosen.split(",")), {**record, "rule": "moderator"}
    # The moderator failed twice: the tied position with the most support over all turns wins.
    support = Counter(",".join(v) for turn in state.history for v in turn.values() if v)
    ranked = sorted(tied, key=lambda k: -support[k])
    if support[ranked[0]] > support[ranked[1]]:
        return tuple(ranked[0].split(",")), {**record, "rule": "cumulative support", "support": dict(support)}
    return (), {**record, "rule": "unresolved tie"}


def panel_position(state: PanelState) -> tuple[str, ...] | None:
    """The panel's current majority letter set, or None when it is split evenly."""
    counts = Counter(m.last for m in state.members if m.last and not m.auxiliary)
    if not counts:
        return None
    top = max(counts.values())
    leaders = [k for k, v in counts.items() if v == top]
    return leaders[0] if len(leaders) == 1 else None
