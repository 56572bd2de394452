"""The seed's pipelines' part of the report, registered in the `medpanel.reports` entry-point group."""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.methods import Deviation, MethodReport, ScenarioFacts
from medpanel.experiments.run.store.rows import Row
from medpanel.methods.panel import contrast, protocol


class PanelReport(MethodReport):
    def study_tables(self, rows: list[Row], conditions: list[str], *, n_boot: int) -> list[Table]:
        t3 = contrast.table3_contrast(rows, conditions, n_boot=n_boot)
        return [t3] if t3 is not None else []

    def deviations(self, scenario: ScenarioFacts) -> list[Deviation]:
        return protocol.deviations(scenario)

    def row_notes(self, rows: Sequence[Row], order: Sequence[str]) -> list[str]:
        note = protocol.screened_critiques(rows, order)
        return [note] if note else []


REPORT = PanelReport()
