"""KAMAC's part of the report, registered in the `medpanel.reports` entry-point group: what still
differs from its code (KAMAC's own), in short; docs/methods/kamac.md gives each one in full, with the
reason."""

from __future__ import annotations

from medpanel.experiments.analysis.methods import SEED_ON_EVERY_CALL, MethodReport, ScenarioFacts, code_differences

METHOD = "kamac"
DIFFERENCES = ("medpanel's own prompt wording", "structured replies, one re-ask, invalid counted; an invalid "
               "moderator reply falls back to the majority",
               "turns bounded by max_turns, panel by max_agents (code: unbounded)",
               "every role on the run's model (code: recruiter, assistant, moderator on gpt-4.1-mini)",
               "the first turn shows full opinions (code: only the letters when all agree)",
               "the plain assessment prompt (the README's runs: --cot, a RADCURE survival prompt)",
               "a skipped recruitment leaves the specialists' histories as they were (code: overwrites their "
               "last message)", "a turn added by a skipped recruitment before the last turn runs (code: its gap "
               "check fails with a KeyError)", SEED_ON_EVERY_CALL)


class KamacReport(MethodReport):
    place = 3  # the published methods' clauses in the order they were published

    def differences(self, scenario: ScenarioFacts) -> list[str]:
        return [code_differences(METHOD, DIFFERENCES)] if scenario.runs(METHOD) else []


REPORT = KamacReport()
