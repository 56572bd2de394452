"""What a method adds to the analysis of a run: the one joint between the analysis room and a method's room.

The analysis room reads every run the same way and names no method. What only one method knows (its
paper's tables, its transition tables, its figures, the settings its paper fixes, how it differs from
its published code) sits in that method's room (`methods/<method>/`) as a `MethodReport`, which the
method registers in the `medpanel.reports` entry-point group: medpanel's own methods in its
pyproject, a method of one's own in its package's, exactly as a pipeline is registered (or, for a
script or a test, with `register_report`). The analysis asks every registered method for each part,
in the order of their `place`; a method adds nothing to a run that does not hold it, so each hook
decides that from the run itself (its pipeline, its conditions, the facts in its rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medpanel.agents.tables import Table
from medpanel.experiments.analysis import method_plugins

if TYPE_CHECKING:
    from medpanel.experiments.analysis.digest import RowDigest
    from medpanel.experiments.analysis.event_facts import EventFacts
    from medpanel.experiments.analysis.trajectory_types import Intervention, Stage
    from medpanel.experiments.run.store.records import RunRecord
    from medpanel.experiments.run.store.rows import Row

@dataclass(frozen=True)
class Deviation:
    """A protocol setting whose value in a run differs from the one its reference fixes."""

    key: str
    """Dotted key, e.g. `settings.rounds`."""
    value: object
    paper: object
    source: str = "paper"
    """Whose value `paper` is: the papers', or a method's published code."""

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        return f"{self.name} = {self.value} ({self.source}: {self.paper})"


@dataclass(frozen=True)
class ScenarioFacts:
    """What a protocol hook reads of a scenario: its pipeline, its settings with the pipeline's defaults
    filled in, and its conditions' flags."""

    pipeline: str
    settings: Mapping[str, object]
    conditions: tuple[Mapping[str, Any], ...]

    @property
    def variants(self) -> set[str]:
        return {str(c.get("flags", {}).get("variant", "")) for c in self.conditions}

    def runs(self, method: str) -> bool:
        """The scenario runs `method` as its pipeline or as a variant (`method` or `method-...`)."""
        return self.pipeline == method or any(v == method or v.startswith(f"{method}-") for v in self.variants)

    def paper_settings(self, want: Sequence[tuple[str, object]]) -> list[Deviation]:
        """A `Deviation` for each (settings key, the reference's value) the scenario changes; a key the
        pipeline does not have resolves to None and is nothing to compare."""
        out: list[Deviation] = []
        for key, paper in want:
            value = self.settings.get(key)
            if value is not None and value != paper:
                out.append(Deviation(f"settings.{key}", value, paper))
        return out


class MethodReport:
    """A method's part of the report. Every hook adds nothing by default; a method overrides the ones
    it has. The report calls them where their tables have always stood."""

    place: int = 0
    """Where the method stands among the others in the report (lower first, then by name): the order
    of their clauses in the protocol line, of their tables where two add some at one place."""

    def tables(self, rows: Sequence[Row], conditions: list[str], record: RunRecord, *, n_boot: int) -> list[Table]:
        """Tables after the pipeline's own ones (the benchmark context's Table 7 shape)."""
        return []

    def study_tables(self, rows: list[Row], conditions: list[str], *, n_boot: int) -> list[Table]:
        """Tables among the study's, before the cost ledger (a paper's contrast)."""
        return []

    def transition_tables(self, digests: Sequence[RowDigest], conditions: Sequence[str] | None, *,
                          scoring: str) -> list[Table]:
        """Tables after the transition and attribution tables, read from the rows' digests."""
        return []

    def figures(self, rows: list[Row], conditions: list[str], record: RunRecord, out_dir: Path, *,
                n_boot: int) -> list[Path]:
        """Figures written with `report --html`, after the run-wide ones."""
        return []

    def stages(self, events: Sequence[EventFacts], gold: Sequence[str], scoring: str,
               scored: bool) -> tuple[str, list[Stage], list[Intervention]] | None:
        """A transcript whose answers are not marked with `AnswerAt` acts but which this method can read:
        (its trajectory kind, the stages before the final, the interventions before the final); None
        when the transcript is not this method's."""
        return None

    def deviations(self, scenario: ScenarioFacts) -> list[Deviation]:
        """Settings the method's paper (or code) fixes that the scenario changes."""
        return []

    def leaves_temperature_out(self, scenario: ScenarioFacts) -> bool:
        """The method's code sends no temperature on some calls (the protocol line says so)."""
        return False

    def differences(self, scenario: ScenarioFacts) -> list[str]:
        """Clauses of the protocol line: how the method, in the scenario, differs from its code."""
        return []

    def row_notes(self, rows: Sequence[Row], order: Sequence[str]) -> list[str]:
        """Clauses of the protocol line read from the run's rows."""
        return []

    def closing(self, scenario: ScenarioFacts) -> str:
        """A sentence that ends the protocol line (what differs by design); "" for none."""
        return ""


SEED_ON_EVERY_CALL = "a seed on every call (model.seed; the code sends none)"
"""A difference every published method's code shares: medpanel sends the run's seed on each call."""


def code_differences(method: str, differences: Sequence[str]) -> str:
    """The protocol line's clause for a method that still differs from its published code."""
    return f"{method} differs from its code in: {', '.join(differences)} (docs/methods/{method}.md)"


def reports() -> list[MethodReport]:
    """Every method's report, installed (read once per process) or registered, by `place` then name."""
    found = method_plugins.registered()
    wrong = [f"{name} ({type(r).__name__})" for name, r in found if not isinstance(r, MethodReport)]
    if wrong:
        raise TypeError(f"{method_plugins.ENTRY_POINTS} entries that are not a MethodReport: {', '.join(wrong)}")
    return [r for _name, r in found if isinstance(r, MethodReport)]


def register_report(name: str, report: MethodReport) -> MethodReport:
    """Adds a method's report for this process (a script's own method, a test's)."""
    method_plugins.register(name, report)
    return report
