"""What the panel records about one question (a result row's `summary`)."""

from __future__ import annotations

from medpanel.methods.panel.channels.knowledge_settings import KnowledgeFacts


class PanelSummary(KnowledgeFacts):
    """Recruitment, the panel's size and the discussion's end; the knowledge channel's facts when it
    retrieved; the coordination's own counts under `-ind` and `c1-routed`."""

    recruited: int | None = None
    recruited_roles: list[str] | None = None
    initial_panel: list[str] | None = None
    recruit_names: list[str] | None = None
    final_panel_size: int | None = None
    critiques_with_weakness: int | None = None
    stopped_early: bool | None = None
    tie: bool | None = None
    self_assessment: bool | None = None
    """Set (true) only under the Table 2B diagnostic."""
    independent: bool | None = None
    auxiliary_assessments: int | None = None
    auxiliary_invalid: int | None = None
    routes: list[str] | None = None
    """Routed coordination: the channel each turn was routed to."""
