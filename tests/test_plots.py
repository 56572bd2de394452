"""Plots: every figure as PNG and SVG, the same CI statistic as the tables, deterministic files."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from medpanel.experiments.analysis import plots
from medpanel.experiments.analysis.plots import PLOTS, pareto_front, write_plots
from medpanel.experiments.analysis.stats import accuracy_cis
from medpanel.experiments.run.store.store import Row, Store

from .inspect_fixtures import grid_run


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[Row]:
    run_dir = grid_run(tmp_path_factory.mktemp("plots"))
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    try:
        return store.rows()
    finally:
        store.close()


CONDITIONS = ["c0r0", "c0r1", "c1r0", "c1r1"]


def test_every_plot_as_png_and_svg(rows: list[Row], tmp_path: Path) -> None:
    from matplotlib.image import imread

    written = write_plots(rows, CONDITIONS, tmp_path, n_boot=300)
    assert sorted(p.name for p in written) == sorted(f"{n}.{ext}" for n in PLOTS for ext in ("png", "svg"))
    for name in PLOTS:
        img = imread(tmp_path / f"{name}.png")
        assert img.shape[0] > 200 and img.shape[1] > 300
        assert float(img[..., :3].std()) > 0.02, f"{name}.png is blank"
        svg = ET.parse(tmp_path / f"{name}.svg").getroot()
        assert svg.tag.endswith("svg")
    # Text stays text in the SVG (svg.fonttype none): the labels are searchable.
    text = (tmp_path / "accuracy_by_condition.svg").read_text()
    for c in CONDITIONS:
        assert f">{c}<" in text
    assert "n=3" in text
    assert "Pareto frontier" in (tmp_path / "accuracy_vs_calls.svg").read_text()
    assert "pubmedqa" in (tmp_path / "accuracy_by_dataset.svg").read_text()


def test_svg_is_deterministic(rows: list[Row], tmp_path: Path) -> None:
    write_plots(rows, CONDITIONS, tmp_path / "a", n_boot=300)
    write_plots(rows, CONDITIONS, tmp_path / "b", n_boot=300)
    for name in PLOTS:
        assert (tmp_path / "a" / f"{name}.svg").read_bytes() == (tmp_path / "b" / f"{name}.svg").read_bytes(), name


def test_uses_the_tables_bootstrap(rows: list[Row], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[int], int]] = []

    def spy(groups: list[list[bool]], **kw: int) -> list[tuple[float, float, float]]:
        calls.append(([len(g) for g in groups], kw["n_boot"]))
        return accuracy_cis(groups, **kw)

    monkeypatch.setattr(plots, "accuracy_cis", spy)
    write_plots(rows, CONDITIONS, tmp_path, n_boot=321)
    assert calls and all(n_boot == 321 for _, n_boot in calls)
    assert calls[0][0] == [3, 3, 3, 3]  # one CI per condition first


def test_single_question_and_unknown_condition(rows: list[Row], tmp_path: Path) -> None:
    one = [dataclasses.replace(rows[0], condition="solo")]
    written = write_plots(one, ["solo", "missing"], tmp_path, n_boot=100)  # nan CI: no error bar, no crash
    assert len(written) == 8
    assert write_plots([], ["c0r0"], tmp_path / "none") == []


def test_pareto_front() -> None:
    pts = [("a", 10, 60.0), ("b", 5, 50.0), ("c", 20, 55.0), ("d", 5, 40.0), ("e", 30, 70.0)]
    assert [p[0] for p in pareto_front(pts)] == ["b", "a", "e"]
    assert pareto_front([]) == []
