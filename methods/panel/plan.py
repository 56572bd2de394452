"""A panel condition's plan (`PanelPlan`): its flags and variant decoded once against the settings,
at plan time (`decode`); what the pipeline's run reads and nothing else (docs/methods/panel.md: "The
plan of a condition")."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from medpanel.agents.plan import ConditionPlan, PlanError
from medpanel.agents.types import Flags, flag_on
from medpanel.methods.panel.channels.knowledge_settings import Timing
from medpanel.methods.panel.settings import PanelSettings

Coordination = Literal["naive", "independent", "routed"]


class PanelPlan(ConditionPlan):
    """A panel condition decoded once, at plan time: the run reads these fields and nothing else
    (docs/methods/panel.md: "The plan of a condition")."""

    challenger: bool
    recruit: bool
    knowledge: bool
    """The `k` flag: knowledge recruitment between turns (routed coordination retrieves without it)."""
    coordination: Coordination = "naive"
    evidence: Literal["none", "corpus", "clear"]
    """The evidence channel the question opens: none, a curator's brief over one corpus, or CLEAR's
    adjudication (`settings.k_source: clear` or the `-clear` variant)."""
    timing: Timing
    """When the channel retrieves: `none` without a channel, `upfront` once before the first turn,
    `between_blind` / `between_gap` after each turn but the last."""
    blind: bool
    """Between turns, the Knowledge Gate does not see the critique: `between_blind`, or no Challenger."""

    @model_validator(mode="after")
    def _routes_on_a_critique(self) -> PanelPlan:
        # `decode` refuses such a condition by name; this keeps a stored plan from running one.
        if self.coordination == "routed" and not self.challenger:
            raise ValueError("routed coordination needs the Challenger (c1)")
        return self

    @property
    def uses_channel(self) -> bool:
        return self.evidence != "none"

    @property
    def between(self) -> bool:
        """The channel is consulted after each turn but the last (the routed controller may skip a turn)."""
        return self.timing in ("between_blind", "between_gap")


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
