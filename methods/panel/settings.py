"""The `settings:` block of a `pipeline: panel` scenario."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from medpanel.methods.panel.channels.knowledge_settings import KnowledgeSettings


class PanelSettings(KnowledgeSettings):
    rounds: int = Field(default=3, ge=1)
    """Discussion rounds (the paper's 3)."""
    turns_per_round: int = Field(default=3, ge=1)
    """Turns per round (the paper's 3); in a turn every active agent answers the same state."""
    initial_specialists: int = Field(default=2, ge=1, le=5)
    """Specialists the selector seats from the question (the paper's 2)."""
    max_recruit_per_turn: int = Field(default=2, ge=0)
    """Recruits that may join after one turn."""
    max_recruit_total: int = Field(default=3, ge=0)
    """Recruits per question."""
    max_panel: int = Field(default=5, ge=1)
    """The panel never grows beyond this many agents."""
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
