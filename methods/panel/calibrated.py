"""The complexity-calibrated backbone (the seed paper's appendix A, Table 5; its live-search study).

A triage call classifies the question as basic, intermediate or advanced, and the level picks
both the discussion and the Challenger's depth:

| level        | discussion                                           | Challenger depth |
|--------------|------------------------------------------------------|------------------|
| basic        | solo: the generalist backbone                        | light            |
| intermediate | small group: one panel of `small_group` specialists  | standard         |
| advanced     | multi-group: `groups` panels discuss separately; the | deep             |
|              | final answer is the majority over all their members  |                  |

The groups of the advanced level are distinct panels: each group's selector is told the roles
seated in earlier groups and must choose others, and the group's identity ("discussion group 2 of
2") is part of its selector's, specialists' and Challenger's requests. So no group replays another
from the response cache (before, group 2 sent group 1's requests and got group 1's replies: one
group counted twice). An upfront brief is retrieved once for the question and shown to every group.

Knowledge recruitment uses the same conditions as the generalist (`no-retrieval`, `upfront`,
`between-blind`, `between-gap`, or flags c/k), so `live_search.yaml` can compare them with the
offline web snapshot or Tavily as the evidence source. An invalid triage reply routes to the
intermediate level and is recorded, so a question is never silently dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal, cast

from pydantic import Field

from medpanel.agents.events import GroupStart, Vote
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.pipelines.base import Outcome, Pipeline
from medpanel.agents.tables import TableSpec
from medpanel.agents.types import Condition, Question, TranscriptEvent
from medpanel.methods.panel.channels.knowledge import BriefResult, KnowledgeChannel, KnowledgeFacts, KnowledgeSettings
from medpanel.methods.panel.channels.tables import knowledge_table
from medpanel.methods.panel.generalist import (
    TIMING_CONDITIONS,
    GeneralistPipeline,
    GeneralistPlan,
    GeneralistSettings,
    GeneralistSummary,
    prepare_retrieval,
    timing_plan,
)
from medpanel.methods.panel.pipeline import PanelPipeline, PanelPlan, decode
from medpanel.methods.panel.roles.triage import Level, triage
from medpanel.methods.panel.settings import PanelSettings
from medpanel.methods.panel.state import Group
from medpanel.methods.panel.summary import PanelSummary
from medpanel.methods.panel.tables import PANEL_TABLES

DEPTH: dict[str, Literal["light", "standard", "deep"]] = {"basic": "light", "intermediate": "standard",
                                                           "advanced": "deep"}


class CalibratedSettings(KnowledgeSettings):
    small_group: int = Field(default=2, ge=2, le=5)
    """Specialists in the intermediate level's single panel."""
    groups: int = Field(default=2, ge=2, le=4)
    """Panels in the advanced level's multi-group discussion."""
    group_size: int = Field(default=2, ge=2, le=5)
    """Specialists in each of the advanced level's panels."""
    rounds: int = Field(default=1, ge=1)
    """Discussion rounds of each panel."""
    turns_per_round: int = Field(default=2, ge=1)
    """Turns per round of each panel."""


class CalibratedSummary(GeneralistSummary, PanelSummary):
    """The level's own facts (the generalist's, one panel's, or the groups' together), and the triage."""

    level: str | None = None
    route: str | None = None
    """solo, small group or multi-group."""
    challenger_depth: str | None = None
    groups: int | None = None
    """Multi-group: how many panels discussed."""
    group_panels: list[list[str]] | None = None


class CalibratedPipeline(Pipeline[CalibratedSettings, GeneralistPlan]):
    settings_model = CalibratedSettings
    plan_model = GeneralistPlan
    summary_model = CalibratedSummary
    flags = ("c", "k")
    variants = tuple(TIMING_CONDITIONS)
    tables = (*PANEL_TABLES, TableSpec(knowledge_table))

    # The same conditions retrieve as in the generalist backbone: the same plan and corpus check.
    def plan(self, condition: Condition, settings: CalibratedSettings) -> GeneralistPlan:
        return timing_plan(condition, settings)

    def prepare(self, plans: Sequence[GeneralistPlan], settings: CalibratedSettings) -> None:
        prepare_retrieval(plans, settings)

    async def __call__(self, question: Question, plan: GeneralistPlan, session: QuestionSession,
                       settings: CalibratedSettings) -> Outcome:
        s = settings
        parsed = await triage(session, question)
        level: Level = parsed.level if parsed is not None else "intermediate"
        session.record(TranscriptEvent(kind="note", role="pipeline", agent="triage", step="route",
                                       content=f"{level} -> {self.route_name(level)}",
                                       data={"level": level, "route": self.route_name(level),
                                             "challenger_depth": DEPTH[level], "triage_valid": parsed is not None}))
        use_c, timing = plan.challenger, plan.timing
        knowledge = s.model_dump(include=set(KnowledgeSettings.model_fields))
        knowledge["timing"] = timing if timing != "none" else s.timing
        if level == "basic":
            gen = GeneralistSettings(**knowledge, challenger_depth=DEPTH[level])
            outcome = await GeneralistPipeline()(question, plan, session, gen)
        else:
            size = s.small_group if level == "intermediate" else s.group_size
            panel = PanelSettings(**knowledge, initial_specialists=size, rounds=s.rounds,
                                  turns_per_round=s.turns_per_round, challenger_depth=DEPTH[level],
                                  max_recruit_per_turn=0)
            sub = decode(plan.slug, {"c": int(use_c), "r": 0, "k": int(timing != "none")}, panel)
            n_groups = 1 if level == "intermediate" else s.groups
            outcome = await self._groups(question, sub, session, panel, n_groups)
        summary = CalibratedSummary().add(outcome.summary)
        summary.level, summary.route = level, self.route_name(level)
        summary.challenger_depth, summary.timing = DEPTH[level], timing
        outcome.summary = summary
        return outcome

    @staticmethod
    def route_name(level: str) -> str:
        return {"basic": "solo", "intermediate": "small group", "advanced": "multi-group"}[level]

    async def _groups(self, question: Question, plan: PanelPlan, session: QuestionSession,
                      settings: PanelSettings, n_groups: int) -> Outcome:
        if n_groups == 1:
            return await PanelPipeline()(question, plan, session, settings)
        # Each group discusses on its own; the groups' members then vote together.
        votes: dict[str, str] = {}
        summaries: list[PanelSummary] = []
        decisions: list[str] = []
        seated: list[str] = []
        upfront: BriefResult | None = None
        upfront_channel: KnowledgeChannel | None = None
        shared = plan.timing == "upfront"
        if shared:
            upfront_channel = KnowledgeChannel(session, question, settings)
            upfront = await upfront_channel.upfront()
        for g in range(1, n_groups + 1):
            session.record(TranscriptEvent(kind="note", role="pipeline", agent=f"group_{g}", step="group_start",
                                           content=f"group {g} of {n_groups}", data={"seated_elsewhere": seated},
                                           act=GroupStart(group=f"g{g}")))
            group = Group(index=g, of=n_groups, seated=tuple(seated), upfront=upfront, shared_upfront=shared)
            outcome = await PanelPipeline().discuss(question, plan, session, settings, group=group)
            facts = outcome.summary
            if not isinstance(facts, PanelSummary):
                raise TypeError(f"a group's discussion summed up as {type(facts).__name__}, not a PanelSummary")
            seated += [r for r in (facts.initial_panel or []) + (facts.recruited_roles or []) if r not in seated]
            vote = next(e for e in reversed(session.events) if e.kind == "vote")
            # The vote's record, as `moderate` writes it: each member's letters, joined.
            group_votes = cast("dict[str, str]", vote.data.get("votes", {}))
            votes.update({f"g{g}:{name}": letters for name, letters in group_votes.items()})
            summaries.append(facts)
            decisions.append(",".join(outcome.answer))
        counts = Counter(votes.values())
        record: dict[str, object] = {"votes": votes, "counts": dict(counts), "rule": "majority over all groups"}
        answer: tuple[str, ...] = ()
        if counts:
            top = max(counts.values())
            tied = sorted(k for k, v in counts.items() if v == top)
            if len(tied) == 1:
                answer = tuple(tied[0].split(","))
            else:
                # Ties across groups go to the groups' own decisions: the tied position most
                # groups reached wins; otherwise the question is invalid, never a default letter.
                group_answers = Counter(d for d in decisions if d)
                ranked = sorted(tied, key=lambda k: -group_answers[k])
                if len(ranked) == 1 or group_answers[ranked[0]] > group_answers[ranked[1]]:
                    answer = tuple(ranked[0].split(","))
                    record["rule"] = "tie across groups -> most group decisions"
                else:
                    record["rule"] = "unresolved tie across groups"
                record["tied"] = tied
        session.record(TranscriptEvent(kind="vote", role="moderator", agent="moderator", step="final_groups",
                                       content=",".join(answer) or "invalid", data=record, act=Vote.of(record)))
        summary = CalibratedSummary(groups=n_groups,
                                    final_panel_size=sum(sm.final_panel_size or 0 for sm in summaries),
                                    recruited=0, group_panels=[sm.initial_panel or [] for sm in summaries])
        channels = ([upfront_channel.facts()] if upfront_channel is not None else []) + \
            [sm for sm in summaries if sm.retrievals is not None]
        if channels:
            # The groups' knowledge channels together, plus the shared upfront brief's channel: that
            # brief was retrieved once for every group, so it counts once.
            summary.add(merge_channel_facts(channels))
        return Outcome(answer=answer, invalid=not answer, summary=summary)


def merge_channel_facts(parts: Sequence[KnowledgeFacts]) -> KnowledgeFacts:
    """Knowledge-channel facts of several channels of one question as one: counts add up, queries
    concatenate in order, recipients unite."""
    return KnowledgeFacts(
        gate_fired=any(p.gate_fired for p in parts),
        queries_written=sum(p.queries_written or 0 for p in parts),
        searches=sum(p.searches or 0 for p in parts),
        retrievals=sum(p.retrievals or 0 for p in parts),
        passages_retrieved=sum(p.passages_retrieved or 0 for p in parts),
        briefs_written=sum(p.briefs_written or 0 for p in parts),
        briefs_delivered=sum(p.briefs_delivered or 0 for p in parts),
        queries=[q for p in parts for q in p.queries or []],
        brief_received_by=sorted({n for p in parts for n in p.brief_received_by or []}),
    )
