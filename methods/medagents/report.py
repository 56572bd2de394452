"""MedAgents' part of the report, registered in the `medpanel.reports` entry-point group: what still
differs from its code (MedAgentsBench's copy), in short; docs/methods/medagents.md gives each one in
full, with the reason."""

from __future__ import annotations

from medpanel.experiments.analysis.methods import SEED_ON_EVERY_CALL, MethodReport, ScenarioFacts, code_differences

METHOD = "medagents"
DIFFERENCES = ("medpanel's own prompt wording", "structured replies with the answer constrained to the "
               "question's letters, one re-ask, invalid counted (code: regex parse, non-letters dropped)",
               "votes are a yes/no field (code: first 'yes'/'no' substring)", SEED_ON_EVERY_CALL)


class MedAgentsReport(MethodReport):
    place = 1  # the published methods' clauses in the order they were published

    def differences(self, scenario: ScenarioFacts) -> list[str]:
        return [code_differences(METHOD, DIFFERENCES)] if scenario.runs(METHOD) else []


REPORT = MedAgentsReport()
