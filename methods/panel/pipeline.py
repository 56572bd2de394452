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
and these auxiliary assessments (`moderate_with_auxiliary`, docs/methods/panel.md: "Independent coordination").

Routed coordination (`c1-routed`, beyond the paper): the Challenger's gap type picks one channel
per turn, recorded as a `route` note: insufficient evidence -> the Knowledge Gate and retrieval;
missing expertise -> specialist recruitment; a logical inconsistency, an unresolved option conflict
or a missing differential -> a focused critique round (the next turn must answer the challenge
point by point); no material weakness -> nothing. Recruits never receive a brief (as in `-ind`),
and the moderator counts agents who saw the same briefs as one correlated block (see `moderate`).

The final answer is the majority of the active agents' last valid letters; a tie goes to the
moderator model, which may choose only among the tied letters (docs/methods/panel.md: "Vote and tie rule").
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from medpanel.agents.pipelines.base import Outcome, Pipeline
from medpanel.agents.plan import PlanError
from medpanel.agents.tables import TableSpec
from medpanel.agents.types import Condition, Flags, Question, flag_on
from medpanel.methods.panel.channels.knowledge_settings import Timing
from medpanel.methods.panel.channels.tables import knowledge_table
from medpanel.methods.panel.plan import Coordination as Coordination  # re-exported: the plan's home before
from medpanel.methods.panel.plan import PanelPlan as PanelPlan
from medpanel.methods.panel.settings import PanelSettings
from medpanel.methods.panel.summary import PanelSummary
from medpanel.methods.panel.tables import PANEL_TABLES, self_assessment_table

if TYPE_CHECKING:
    from medpanel.agents.model.client import QuestionSession
    from medpanel.methods.panel.state import Group


def decode(slug: str, flags: Flags, settings: PanelSettings) -> PanelPlan:
    """The plan of a panel condition: its flags and variant read against the settings, once."""
    variant = flags.get("variant")
    coordination: Coordination = "routed" if variant == "routed" else "independent" if variant == "ind" else "naive"
    challenger, knowledge = flag_on(flags, "c"), flag_on(flags, "k")
    if coordination == "routed" and not challenger:
        # Refused here, with the plan, not when the first question runs: the controller routes on the
        # Challenger's gap type, which c0 never produces.
        raise PlanError(f"condition {slug!r}: routed coordination routes on the Challenger's diagnosis, which "
                        f"c0 switches off. Use {slug.replace('c0', 'c1', 1)} (or drop the variant)",
                        field="variants")
    channel = knowledge or coordination == "routed"
    clear = settings.k_source == "clear" or variant == "clear"
    # `timing: none` beside a channel: the panel retrieves between turns, its default, as it always did
    timing: Timing = ("none" if not channel else "between_gap" if settings.timing == "none" else settings.timing)
    between = timing in ("between_blind", "between_gap")
    return PanelPlan(slug=slug, flags=flags, variant=str(variant) if variant else None, challenger=challenger,
                     recruit=flag_on(flags, "r"), knowledge=knowledge, coordination=coordination,
                     evidence="none" if not channel else "clear" if clear else "corpus", timing=timing,
                     blind=between and (timing == "between_blind" or not challenger))


def _discussion() -> ModuleType:
    """The discussion (`discussion`: the agents, the channels, the vote), imported when a run first
    prepares or discusses: start-up of a report, which reads only the pipeline's settings and tables,
    stays free of every agent and the model client."""
    from medpanel.methods.panel import discussion

    return discussion


class PanelPipeline(Pipeline[PanelSettings, PanelPlan]):
    settings_model = PanelSettings
    plan_model = PanelPlan
    summary_model = PanelSummary
    flags = ("c", "r", "k")
    variants = ("ind", "routed", "clear")
    """`-ind` independent coordination, `c1-routed` routed coordination, `-clear` CLEAR as the
    evidence channel (the same as `settings.k_source: clear`, as a condition of its own)."""
    tables = (*PANEL_TABLES, TableSpec(knowledge_table), TableSpec(self_assessment_table))

    def plan(self, condition: Condition, settings: PanelSettings) -> PanelPlan:
        return decode(condition.slug, condition.flags, settings)

    def read_plan(self, stored: dict[str, Any], settings: PanelSettings) -> PanelPlan:
        if "evidence" in stored:
            return PanelPlan.model_validate(stored)
        # Stored before `k` was decoded at plan time: that version decoded these same flags against
        # these same settings as each question ran, which is what `decode` does now.
        return decode(str(stored["slug"]), dict(stored.get("flags") or {}), settings)

    def prepare(self, plans: Sequence[PanelPlan], settings: PanelSettings) -> None:
        _discussion().prepare(plans, settings)

    def uses_verifier(self, plans: Sequence[PanelPlan], settings: PanelSettings) -> bool:
        return any(p.evidence == "clear" for p in plans)

    async def __call__(self, question: Question, plan: PanelPlan, session: QuestionSession,
                       settings: PanelSettings) -> Outcome:
        return await self.discuss(question, plan, session, settings)

    async def discuss(self, question: Question, plan: PanelPlan, session: QuestionSession,
                      settings: PanelSettings, *, group: Group | None = None) -> Outcome:
        """One panel's discussion; `group` when it is one of several panels on the same question."""
        outcome: Outcome = await _discussion().discuss(question, plan, session, settings, group=group)
        return outcome
