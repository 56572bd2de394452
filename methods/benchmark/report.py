"""The benchmark context's part of the report, registered in the `medpanel.reports` entry-point group:
the Table 7 shape and the paired table for a run of the benchmark's methods, the published references
a run names (`references:`), their figures, and what differs from MedAgentsBench's code."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.methods import Deviation, MethodReport, ScenarioFacts
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row
from medpanel.methods.benchmark import protocol, references, tables

CODE = "benchmark's code"


class BenchmarkReport(MethodReport):
    def tables(self, rows: Sequence[Row], conditions: list[str], record: RunRecord, *, n_boot: int) -> list[Table]:
        out = tables.benchmark_tables(rows, conditions, record, n_boot=n_boot)  # Table 7 shape: benchmark runs
        return out + references.reference_tables(rows, conditions, record, n_boot=n_boot)  # runs in `references:`

    def figures(self, rows: list[Row], conditions: list[str], record: RunRecord, out_dir: Path, *,
                n_boot: int) -> list[Path]:
        written = references.write_reference_forest(rows, record, conditions, out_dir, n_boot=n_boot)
        if tables.applies(record):  # the Table 7 run's accuracy-vs-tokens Pareto figure
            written += tables.write_pareto(rows, conditions, out_dir, n_boot=n_boot)
        return written

    def deviations(self, scenario: ScenarioFacts) -> list[Deviation]:
        methods = protocol.methods_of(scenario.pipeline, scenario.variants)
        return [Deviation(key, value, code, CODE)
                for key, value, code in protocol.setting_differences(methods, scenario.settings)]

    def closing(self, scenario: ScenarioFacts) -> str:
        design = protocol.by_design(protocol.methods_of(scenario.pipeline, scenario.variants))
        return f"Differs from the benchmark's code by design: {design}" if design else ""


REPORT = BenchmarkReport()
