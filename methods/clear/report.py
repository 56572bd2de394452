"""CLEAR's part of the report, registered in the `medpanel.reports` entry-point group: its pathway and
ruling tables after the transitions, and the retrieval depths its paper fixes.

| setting | value | source |
|---|---|---|
| `settings.k` | 16 | CLEAR's local top-16 |
| `settings.dynamic_k` | 8 | CLEAR A.2: "the eight retrieved dynamic documents" |
"""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.digest import RowDigest
from medpanel.experiments.analysis.event_facts import EventFacts
from medpanel.experiments.analysis.methods import Deviation, MethodReport, ScenarioFacts
from medpanel.experiments.analysis.trajectory_types import Intervention, Stage
from medpanel.methods.clear import trajectory
from medpanel.methods.clear.transitions import pathway_table, ruling_table

LOCAL_MODES = {"rag-bm25", "rag-dense", "clear-default", "clear-dual", "clear-qpis", "clear-no-followup"}
"""CLEAR's conditions that retrieve from the local corpus (`settings.k`)."""
DYNAMIC_MODES = {"online", "clear-default", "clear-dual", "clear-qpis", "clear-no-followup"}
"""CLEAR's conditions that search the web (`settings.dynamic_k`)."""


class ClearReport(MethodReport):
    def transition_tables(self, digests: Sequence[RowDigest], conditions: Sequence[str] | None, *,
                          scoring: str) -> list[Table]:
        return [t for t in (pathway_table(digests, conditions, scoring=scoring),
                            ruling_table(digests, conditions, scoring=scoring)) if t is not None]

    def stages(self, events: Sequence[EventFacts], gold: Sequence[str], scoring: str,
               scored: bool) -> tuple[str, list[Stage], list[Intervention]] | None:
        if not trajectory.is_clear(events):
            return None
        return (trajectory.KIND, *trajectory.clear_stages(events, gold, scoring, scored))

    def deviations(self, scenario: ScenarioFacts) -> list[Deviation]:
        if scenario.pipeline != "clear":
            return []
        modes = scenario.variants - {""} or {"clear-default"}
        want: list[tuple[str, object]] = []
        if modes & LOCAL_MODES:
            want.append(("k", 16))
        if modes & DYNAMIC_MODES:
            want.append(("dynamic_k", 8))
        return scenario.paper_settings(want)


REPORT = ClearReport()
