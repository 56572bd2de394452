"""A panel condition's plan (`PanelPlan`): what the pipeline's run reads and nothing else, decoded
once at plan time by the pipeline (`pipeline.decode`; docs/methods/panel.md: "The plan of a
condition"). Its own module so that the discussion reads it without importing the pipeline."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from medpanel.agents.plan import ConditionPlan
from medpanel.methods.panel.channels.knowledge_settings import Timing

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
