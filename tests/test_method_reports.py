"""A method's own part of the report reaches it through `MethodReport` (experiments/analysis/methods.py):
the built-in methods through the `medpanel.reports` entry points, one's own through the same group or
`register_report`, each hook at its place."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from medpanel.agents.tables import Table
from medpanel.experiments.analysis import method_plugins
from medpanel.experiments.analysis.methods import MethodReport, ScenarioFacts, register_report, reports
from medpanel.experiments.analysis.protocol import protocol_line
from medpanel.experiments.analysis.report import build_tables
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row
from tests.run_records import run_record

ROOT = Path(__file__).resolve().parents[1]


def row(cond: str, qid: str, correct: bool, *, changed: bool = False) -> Row:
    return Row(condition=cond, dataset="d", qid=qid, repeat=0, answer="A" if correct else "B", gold="A",
               correct=correct, invalid=False, error=None, error_kind=None, calls=1, logical_calls=1, tokens=10,
               latency_s=0.1, summary={"changed": changed}, transcript="", cost_usd=0.0)


class AdvocateReport(MethodReport):
    """docs/extending.md's example: a table of its own and a clause of the protocol line."""

    def tables(self, rows: Sequence[Row], conditions: list[str], record: RunRecord, *, n_boot: int) -> list[Table]:
        changed = [r for r in rows if r.summary.get("changed")]
        return [Table("Answers the advocate changed", ["changed", "questions"], [[len(changed), len(rows)]])]

    def differences(self, scenario: ScenarioFacts) -> list[str]:
        return ["the advocate argues once"] if scenario.pipeline.endswith(":DevilsAdvocate") else []


@pytest.fixture
def advocate() -> Iterator[AdvocateReport]:
    report = register_report("advocate", AdvocateReport())
    yield report
    method_plugins._REGISTERED.pop("advocate")


def test_the_built_in_methods_register_through_the_entry_point_group_a_users_method_uses() -> None:
    from importlib import metadata

    names = {e.name for e in metadata.entry_points(group=method_plugins.ENTRY_POINTS)}
    rooms = {p.name for p in (ROOT / "methods").iterdir() if (p / "report.py").is_file()}
    assert names == rooms == {"panel", "clear", "baselines", "benchmark", "medagents", "mdagents", "kamac"}
    kinds = [type(r).__name__ for r in reports()]
    # the published methods' clauses in the order they were published
    assert kinds.index("MedAgentsReport") < kinds.index("MDAgentsReport") < kinds.index("KamacReport")


def test_a_methods_own_table_follows_the_pipelines_and_its_clause_joins_the_protocol_line(
        advocate: AdvocateReport) -> None:
    rows = [row("d0", "1", True), row("d1", "1", False, changed=True)]
    meta = {"conditions": [{"slug": "d0", "flags": {"d": 0}}, {"slug": "d1", "flags": {"d": 1}}],
            "scenario": {"pipeline": "devils_advocate:DevilsAdvocate"}}
    titles = [t.title for t in build_tables(rows, run_record(meta), n_boot=50)]
    assert titles.index("Answers the advocate changed") >= 3  # after accuracy, cost and compute
    table = next(t for t in build_tables(rows, run_record(meta), n_boot=50) if t.title.startswith("Answers"))
    assert table.rows == [[1, 2]]
    line = protocol_line({"pipeline": "devils_advocate:DevilsAdvocate", "flags": {"d": [0, 1]}})
    assert line.endswith("; the advocate argues once")
    assert "advocate" not in protocol_line({"pipeline": "generalist"})


def test_an_entry_that_is_not_a_method_report_is_named() -> None:
    method_plugins.register("broken", object())  # type: ignore[arg-type]
    try:
        with pytest.raises(TypeError, match="broken"):
            reports()
    finally:
        method_plugins._REGISTERED.pop("broken")


def test_metadata_without_medpanels_own_methods_is_an_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    monkeypatch.setattr(method_plugins, "_INSTALLED", [])
    monkeypatch.setattr(metadata, "entry_points", lambda **_kw: [])
    with pytest.raises(RuntimeError, match="reinstall it, make setup or pip install -e"):
        reports()
