"""The baselines' part of the report, registered in the `medpanel.reports` entry-point group: `sc`
samples at the protocol's temperature, 0, unless the scenario says otherwise (and declares it)."""

from __future__ import annotations

from medpanel.experiments.analysis.methods import Deviation, MethodReport, ScenarioFacts


class BaselinesReport(MethodReport):
    def deviations(self, scenario: ScenarioFacts) -> list[Deviation]:
        if scenario.pipeline == "sc" or (scenario.pipeline == "baseline" and "sc" in scenario.variants):
            return scenario.paper_settings([("temperature", 0.0)])
        return []


REPORT = BaselinesReport()
