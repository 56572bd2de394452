"""The answer-transition figures: files, the counts they draw (read back from the SVG's
text), and a headless Chromium rendering of the SVG and PNG whose colours follow correctness."""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from medpanel.experiments.analysis.transition_plots import (
    COLOURS,
    flow_counts,
    transition_plot_names,
    write_transition_plots,
)

from .test_transitions import P1, Q1, Q2, Q3, Q4
from .transition_fixtures import doc, ev, trajectories, turn, vote

CHROMIUM = Path("/usr/bin/chromium")


def simple(cond: str, qid: str, first: str, final: str, gold: str = "A") -> dict:
    return doc(cond, qid, [turn("a", 1, first), vote(final)], final, gold)


def svg_texts(path: Path) -> list[str]:
    return [el.text or "" for el in ET.parse(path).iter() if el.tag.endswith("text")]


def test_flow_counts_and_files(tmp_path: Path) -> None:
    extra = [simple("c1", f"x{i}", "B", "A") for i in range(5)]
    free = doc("ft", "f", [ev("call", "candidate", "parametric", "parametric", parsed={"answer": "text"})], "",
               gold="", options={})
    ts = trajectories([Q1, Q2, Q3, Q4, P1, *extra, free])
    assert flow_counts([t for t in ts if t.condition == "c1"]) == {
        ("wrong", "right"): 6, ("right", "wrong"): 1, ("invalid", "right"): 1, ("right", "error"): 1}
    files = write_transition_plots(ts, tmp_path / "plots", ["c1", "c0", "ft"])
    names = sorted(p.name for p in files)
    # no figure for a condition with nothing to score
    assert names == sorted(f"{n}.{x}" for n in ("transitions_c1", "transitions_c0", "transitions")
                           for x in ("png", "svg"))
    assert all(p.stat().st_size > 5000 for p in files if p.suffix == ".png")
    # The report's index names the figures before another process draws them: the same names, in order.
    assert transition_plot_names(ts, ["c1", "c0", "ft"]) == [p.stem for p in files if p.suffix == ".png"] == [
        "transitions_c1", "transitions_c0", "transitions"]
    assert transition_plot_names([t for t in ts if t.condition == "ft"], ["ft"]) == []
    texts = svg_texts(tmp_path / "plots" / "transitions_c1.svg")
    for label in ("wrong → right: 6", "right → wrong: 1", "invalid → right: 1", "right → error: 1",
                  "right 2", "wrong 6", "invalid 1", "right 7", "wrong 1", "error 1"):
        assert label in texts, (label, texts)
    assert any("n=9, net gain +5" in t for t in texts)
    bars = svg_texts(tmp_path / "plots" / "transitions.svg")
    assert {"wrong->right", "right->wrong", "invalid->right", "errors", "wrong->wrong"} <= set(bars)
    assert "free_text" not in bars


def test_figures_are_reproducible(tmp_path: Path) -> None:
    ts = trajectories([simple("c", f"q{i}", "B", "A") for i in range(3)])
    a = write_transition_plots(ts, tmp_path / "a")
    b = write_transition_plots(ts, tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def _chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           "--allow-file-access-from-files", "--virtual-time-budget=3000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _near(pixels: np.ndarray, hex_colour: str, alpha: float = 1.0, tol: float = 8.0) -> int:
    """Pixels within `tol` (0-255 scale) of the colour painted at `alpha` over white."""
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)
    want = alpha * rgb + (1 - alpha) * 255.0
    return int((np.abs(pixels[..., :3] * 255.0 - want).max(axis=-1) <= tol).sum())


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (apt-get install chromium)")
def test_chromium_renders_the_figure_coloured_by_correctness(tmp_path: Path) -> None:
    from matplotlib.image import imread

    # eight questions turned right, one turned wrong: the bands are mostly the final "right" green
    ts = trajectories([simple("c", f"r{i}", "B", "A") for i in range(8)] + [simple("c", "w", "A", "B")])
    write_transition_plots(ts, tmp_path)
    page = tmp_path / "page.html"
    page.write_text(
        "<!doctype html><html><body style='margin:0;background:#fff'>"
        "<div style='height:450px'><img id='svg' src='transitions_c.svg' style='width:600px'></div>"
        "<div style='height:450px'><img id='png' src='transitions_c.png' style='width:600px'></div>"
        "<script>window.onload=()=>{const ok=[...document.images].filter(i=>i.complete&&i.naturalWidth>0);"
        "document.body.dataset.loaded=ok.length;}</script></body></html>", encoding="utf-8")
    dom = _chromium(["--dump-dom", page.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert re.search(r'data-loaded="2"', dom.stdout), "the SVG or the PNG did not load"
    png = tmp_path / "shot.png"
    shot = _chromium(["--window-size=800,900", f"--screenshot={png}", page.as_uri()], tmp_path)
    assert shot.returncode == 0, shot.stderr[-2000:]
    pixels = imread(png)
    for name, region in (("svg", pixels[:450]), ("png", pixels[450:900])):
        green_bands = _near(region, COLOURS["right"], alpha=0.55)
        red_bands = _near(region, COLOURS["wrong"], alpha=0.55)
        assert red_bands > 0 and green_bands > 4 * red_bands, (name, green_bands, red_bands)
        assert _near(region, COLOURS["right"]) > 500 and _near(region, COLOURS["wrong"]) > 500, name  # the nodes
