"""MDAgents' part of the report, registered in the `medpanel.reports` entry-point group: what still
differs from its code (MedAgentsBench's copy), in short, and which of its calls send a temperature
(its code sends none on most); docs/methods/mdagents.md gives each one in full, with the reason."""

from __future__ import annotations

from medpanel.experiments.analysis.methods import SEED_ON_EVERY_CALL, MethodReport, ScenarioFacts, code_differences

METHOD = "mdagents"
DIFFERENCES = ("medpanel's own prompt wording", "structured replies replace the answer-parser call "
               "(one call fewer); an invalid moderator reply falls back to the experts' majority",
               "no agent-opening calls (code: each agent first sends its own instruction)",
               "options in their order (code: unseeded shuffle)",
               "exemplars drawn seeded from exemplar_file, the builtin six by default (code: 5 from the "
               "dataset's train split, unseeded)",
               "experts named by specialty alone (code: with the recruiter's one-line description)",
               SEED_ON_EVERY_CALL)
SAMPLING = ("mdagents sends a temperature only where its code does (the solo answer, the moderator, the "
            "ICT decision: model.temperature); every other call sends none, so the provider's default applies")


class MDAgentsReport(MethodReport):
    place = 2  # the published methods' clauses in the order they were published

    def leaves_temperature_out(self, scenario: ScenarioFacts) -> bool:
        return scenario.runs(METHOD)

    def differences(self, scenario: ScenarioFacts) -> list[str]:
        return [SAMPLING, code_differences(METHOD, DIFFERENCES)] if scenario.runs(METHOD) else []


REPORT = MDAgentsReport()
