"""Comparing runs: questions aligned by (dataset, qid) across run directories.

Each run's conditions are relabelled `<run dir name>/<condition>` so that two runs of the same
scenario (another model, another seed) become conditions of one table, and the paired statistics
of `report.paired_table` (bootstrap CI + exact McNemar, on the questions both answered) apply
unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.report import accuracy_table, cost_table, paired_table
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import RunData, load_run


def run_labels(run_dirs: list[Path]) -> list[str]:
    """Directory names, lengthened with parent folders until they are unique."""
    paths = [Path(p).resolve() for p in run_dirs]
    for depth in range(1, 8):
        labels = ["/".join(p.parts[-depth:]) for p in paths]
        if len(set(labels)) == len(labels):
            return labels
    raise UserError("the same run directory was given twice. Give each run once", field="RUN_DIRS")


@dataclasses.dataclass
class Comparison:
    runs: list[RunData]
    labels: list[str]
    rows: list[Row]
    """Every run's rows, conditions relabelled `<label>/<condition>`."""
    conditions: list[str]
    pairs: list[tuple[str, str]]
    common: set[tuple[str, str]]
    """(dataset, qid) answered in every compared condition."""


def align(run_dirs: list[Path], *, pairs: list[tuple[str, str]] | None = None,
          conditions: list[str] | None = None) -> Comparison:
    if len(run_dirs) < 2:
        raise UserError("compare needs at least two run directories. Example: medpanel compare runs/a runs/b",
                        field="RUN_DIRS")
    runs = [load_run(Path(d), arg="RUN_DIRS") for d in run_dirs]
    labels = run_labels([r.run_dir for r in runs])
    if conditions:
        known = list(dict.fromkeys(c for run in runs for c in run.conditions))
        unknown = [c for c in conditions if c not in known]
        if unknown:
            raise UserError(f"no run has condition {unknown[0]!r}. The runs' conditions are: {', '.join(known)}",
                            field="--condition")
    rows: list[Row] = []
    ordered: list[str] = []
    slugs_by_run: list[list[str]] = []
    for label, run in zip(labels, runs, strict=True):
        slugs = [c for c in run.conditions if conditions is None or c in conditions]
        slugs_by_run.append(slugs)
        ordered += [f"{label}/{c}" for c in slugs]
        rows += [dataclasses.replace(r, condition=f"{label}/{r.condition}") for r in run.rows if r.condition in slugs]
    if not rows:
        raise UserError("no finished questions in these runs" + (" for the chosen conditions" if conditions else ""),
                        field="RUN_DIRS")
    if pairs:
        unknown = sorted({x for p in pairs for x in p} - set(ordered))
        if unknown:
            raise UserError(f"unknown label {unknown[0]!r}. Labels are run/condition, one of: {', '.join(ordered)}",
                            field="--pair")
    else:
        pairs = default_pairs(labels, slugs_by_run)
    keys = [{r.key for r in rows if r.condition == c} for c in ordered]
    common = set.intersection(*keys) if keys else set()
    return Comparison(runs=runs, labels=labels, rows=rows, conditions=ordered, pairs=pairs, common=common)


def default_pairs(labels: list[str], slugs_by_run: list[list[str]]) -> list[tuple[str, str]]:
    """The same condition in the first run against every other run; with no shared condition,
    every condition of one run against every condition of another."""
    out = []
    for slug in slugs_by_run[0]:
        for label, slugs in zip(labels[1:], slugs_by_run[1:], strict=True):
            if slug in slugs:
                out.append((f"{labels[0]}/{slug}", f"{label}/{slug}"))
    if out:
        return out
    for (la, sa), (lb, sb) in itertools.combinations(zip(labels, slugs_by_run, strict=True), 2):
        out += [(f"{la}/{a}", f"{lb}/{b}") for a in sa for b in sb]
    return out


def compare_tables(cmp: Comparison, *, n_boot: int = 10000) -> list[Table]:
    out = []
    for label, run in zip(cmp.labels, cmp.runs, strict=True):
        model = run.record.model
        out.append([label, run.record.name, f"{model.backend or ''}/{model.name or 'default'}",
                    ", ".join(run.conditions), len({r.key for r in run.rows}), len(run.rows)])
    runs = Table("Runs compared", ["label", "scenario", "model", "conditions", "questions", "rows"], out)
    aligned = [r for r in cmp.rows if r.key in cmp.common]
    tables = [runs]
    if aligned:
        acc = accuracy_table(aligned, cmp.conditions)
        acc.title = "Accuracy on the questions every run answered"
        acc.note = (f"{len(cmp.common)} questions answered in every compared condition. " + acc.note)
        tables += [acc, cost_table(aligned, cmp.conditions)]
    paired = paired_table(cmp.rows, cmp.pairs, n_boot=n_boot)
    paired.note = "Each pair uses the questions both sides answered (same dataset, qid and repeat). " + paired.note
    tables.append(paired)
    return tables
