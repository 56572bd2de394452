"""`medpanel report` at the terminal's width: whole columns left out and named, never slivers."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.agents.tables import Table
from medpanel.experiments.analysis.report import build_tables, csv_name
from medpanel.experiments.cli import output as cli
from medpanel.experiments.cli.fit import MIN_COLUMN, WHOLE_CELL, fit
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.rundir import load_record, open_store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_2x2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("width")
    sc = load_scenario(ROOT / "scenarios/ablation_2x2.yaml", ["model.backend=scripted",
                                                              "dataset={source: sample, limit: 1}"])
    runner = Runner.create(make_plan(sc, base_dir=ROOT / "scenarios"), run_dir=tmp / "run")
    runner.client_factory = lambda spec: ScriptedChatCompletionClient()
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner.run_dir


def _tables(run_dir: Path) -> list[Table]:
    meta = load_record(run_dir)
    store = open_store(run_dir, meta)
    rows = store.rows()
    store.close()
    from medpanel.experiments.analysis.digest import read_digests

    return build_tables(rows, meta, n_boot=200, digests=list(read_digests(run_dir, rows)))


def _boxes(lines: list[str]) -> list[tuple[int, list[str], list[int]]]:
    """Each rendered table: (index of its top line, its column headers, its columns' text widths)."""
    out = []
    for i, line in enumerate(lines):
        if not line.startswith("┏"):
            continue
        widths = [len(seg) - 2 for seg in line[1:-1].split("┳")]  # minus the padding on each side
        heads = [""] * len(widths)
        for head in lines[i + 1:]:
            if not head.startswith("┃"):
                break
            for k, cell in enumerate(head[1:-1].split("┃")):
                heads[k] += cell.strip()
        out.append((i, heads, widths))
    return out


@pytest.mark.parametrize("width", [80, 160])
def test_every_table_fits_the_width_and_names_what_it_left_out(run_2x2: Path, monkeypatch: pytest.MonkeyPatch,
                                                               width: int) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, width=width, color_system=None))
    cli.summarise(run_2x2)
    text = buf.getvalue()
    lines = text.splitlines()
    assert max(len(x) for x in lines) <= width
    tables = _tables(run_2x2)
    boxes = _boxes(lines)
    assert [lines[i - 1].strip() for i, _, _ in boxes] == [t.title for t in tables]  # every table, each under its title
    dropped_any = False
    for t, (i, heads, widths) in zip(tables, boxes, strict=True):
        assert heads == [c for c in t.columns if c in heads], t.title  # whole columns, in the table's order
        for head, w in zip(heads, widths, strict=True):
            # the rule: a column is as wide as its header's longest word (headers never break
            # mid-word) and never under MIN_COLUMN characters
            assert w >= max(MIN_COLUMN, *(len(x) for x in head.split())), (t.title, head, w)
        left_out = [c for c in t.columns if c not in heads]
        bottom = next(k for k in range(i, len(lines)) if lines[k].startswith("└"))
        after = " ".join(lines[bottom + 1:bottom + 12])
        if left_out:
            dropped_any = True
            note = (f"{len(heads)} of {len(t.columns)} columns shown at {width} columns; left out: "
                    f"{', '.join(left_out)}. Every column: {run_2x2 / 'report' / csv_name(t)} (and report.md "
                    "beside it)")
            # compared without white space: the line wraps at the width, a long path anywhere
            assert re.sub(r"\s", "", after).startswith(re.sub(r"\s", "", note)), (t.title, after)
        else:
            assert " columns shown at " not in after.split(".")[0]
    if width == 80:
        assert dropped_any  # the 19-column transitions table cannot fit 80 columns
    # the files keep every column, whatever the terminal showed
    report = run_2x2 / "report"
    md = (report / "report.md").read_text(encoding="utf-8")
    for t in tables:
        with open(report / csv_name(t), encoding="utf-8", newline="") as fh:
            assert next(csv.reader(fh)) == t.columns
        assert "| " + " | ".join(t.columns) + " |" in md


def test_the_transitions_table_keeps_its_estimate_at_80_columns(run_2x2: Path) -> None:
    t = next(t for t in _tables(run_2x2) if t.title.startswith("Answer transitions"))
    assert len(t.columns) == 19
    console = Console(file=io.StringIO(), width=80, color_system=None)
    fitted = fit(t, console)
    # the estimate, its CI and the final accuracy stay (the table's keep); the cell counts go first
    assert {"condition", "dataset", "net_gain_pts", "95%_CI_pts", "final_acc_%"} <= set(fitted.widths)
    assert "right->right" in fitted.dropped
    ci = t.columns.index("95%_CI_pts")
    assert fitted.widths["95%_CI_pts"] >= max(len(r[ci]) for r in t.rows)  # a CI is never split over lines
    wide = fit(t, Console(file=io.StringIO(), width=160, color_system=None))
    assert len(wide.dropped) < len(fitted.dropped)


def test_columns_never_break_a_word_and_the_first_column_stays() -> None:
    t = Table("t", ["condition", *[f"column_{i}" for i in range(12)], "verdict"],
              [["c1r1-ind+variant@model", *(f"[-{i}.5, +37.5]" for i in range(12)), "no detectable difference"]],
              keep=("condition", "verdict"))
    for width in (20, 40, 80, 160):
        fitted = fit(t, Console(file=io.StringIO(), width=width, color_system=None))
        assert "condition" in fitted.widths
        for col, w in fitted.widths.items():
            i = t.columns.index(col)
            cell = str(t.rows[0][i])
            words = [*col.split(), *(cell.split() if len(cell) > WHOLE_CELL else [cell])]
            assert w >= max(MIN_COLUMN, *(len(x) for x in words)), (width, col, w)
        # the unkept columns go first, right to left; verdict only when nothing else is left
        if "verdict" in fitted.dropped:
            assert list(fitted.widths) == ["condition"]
        else:
            assert fitted.dropped == [c for c in t.columns[1:-1] if c not in fitted.widths]
            shown = [c for c in t.columns[1:-1] if c in fitted.widths]
            assert shown == t.columns[1:1 + len(shown)]


def test_columns_env_sets_the_width_of_piped_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.make_console().width == 80
    monkeypatch.delenv("COLUMNS")
    assert cli.make_console().width == 160  # piped (pytest captures stdout): wide, not rich's 80
