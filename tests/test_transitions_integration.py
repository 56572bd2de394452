"""The answer-transition analysis where researchers read it: `medpanel report` (terminal and
markdown), the HTML index's figure and each question page's flip marker, and `medpanel export`'s
trajectory columns, all from one scripted 2x2 whose flips are known (see test_transitions_runs)."""

from __future__ import annotations

import csv
import html
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from medpanel.api import load_run
from medpanel.experiments.analysis.transition_plots import COLOURS
from medpanel.experiments.view.viewer import build_site, page_name

from .test_transition_plots import CHROMIUM, _chromium, _near
from .test_transitions_runs import grid_dir  # noqa: F401  (the module-scoped scripted 2x2)

CONDITIONS = ("c0r0", "c0r1", "c1r0", "c1r1")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medpanel", *args], capture_output=True, text=True, timeout=300,
                          env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_report_prints_and_writes_the_transition_and_attribution_tables(grid_dir: Path) -> None:  # noqa: F811
    out = _cli("report", str(grid_dir))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Answer transitions (first-turn majority -> final)" in out.stdout
    assert "What came before each flip (association, not causation)" in out.stdout
    md = (grid_dir / "report" / "report.md").read_text(encoding="utf-8")
    assert "## Answer transitions" in md and "## What came before each flip" in md
    rows = {(r["condition"], r["dataset"]): r for r in _csv_rows(grid_dir / "report" / "answer_transitions.csv")}
    # hand-computed: every agent answers B until it sees a critique; gold A, B, A: without the
    # Challenger beta stays right and alpha and gamma stay wrong
    for cond in ("c0r0", "c0r1"):
        r = rows[(cond, "overall")]
        assert (r["n"], r["right->right"], r["wrong->wrong"], r["wrong->right"], r["net_gain"]) == \
            ("3", "1", "2", "0", "0")
    for cond in ("c1r0", "c1r1"):  # the critique turns alpha and gamma right and beta wrong
        r = rows[(cond, "overall")]
        assert (r["n"], r["wrong->right"], r["right->wrong"], r["net_gain"]) == ("3", "2", "1", "1")
    attribution = _csv_rows(grid_dir / "report" / "what_came_before_each_flip.csv")
    crit = next(r for r in attribution if r["condition"] == "c1r0" and r["intervention"] == "critique")
    assert (crit["flips"], crit["to_right"], crit["to_wrong"]) == ("3", "2", "1")


def test_export_carries_the_trajectory_and_agrees_with_the_table(grid_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    out = _cli("export", str(grid_dir), "--format", "csv", "--out", str(tmp_path / "x.csv"))
    assert out.returncode == 0, out.stdout + out.stderr
    with open(tmp_path / "x.csv", encoding="utf-8") as fh:
        recs = list(csv.DictReader(fh))
    assert len(recs) == 12
    table = next(t for t in load_run(grid_dir).tables().values() if t.title.startswith("Answer transitions"))
    overall = {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.rows if row[1] == "overall"}
    for cond in CONDITIONS:
        mine = Counter(r["trajectory.transition"] for r in recs if r["condition"] == cond)
        assert {k: v for k, v in overall[cond].items() if "->" in k and v} == dict(mine)
    alpha = next(r for r in recs if r["condition"] == "c1r0" and r["qid"] == "alpha")
    assert (alpha["trajectory.first"], alpha["trajectory.final"], alpha["trajectory.flip_stage"]) == ("B", "A", "r1t2")
    assert "critique" in alpha["trajectory.flip_after"]
    quiet = next(r for r in recs if r["condition"] == "c0r0" and r["qid"] == "alpha")
    assert (quiet["trajectory.flips"], quiet["trajectory.flip_stage"]) == ("0", "")


def test_question_pages_mark_the_flip_and_the_index_has_the_figure(grid_dir: Path) -> None:  # noqa: F811
    build_site(grid_dir, n_boot=200)
    index = (grid_dir / "report" / "index.html").read_text(encoding="utf-8")
    figures = re.findall(r'<img class="plot transition" src="(plots/transitions[^"]*\.png)"', index)
    assert sorted(figures) == sorted(["plots/transitions.png", *(f"plots/transitions_{c}.png" for c in CONDITIONS)])
    assert all((grid_dir / "report" / f).is_file() for f in figures)
    page = (grid_dir / "report" / "questions" / page_name("medqa", "alpha")).read_text(encoding="utf-8")
    sections = dict(re.findall(r'<section class="col" id="(c\d+)" data-condition="([^"]+)"', page))
    by_cond = {v: k for k, v in sections.items()}
    body = {c: page.split(f'id="{by_cond[c]}" data-condition="{c}"', 1)[1].split("</section>", 1)[0]
            for c in CONDITIONS}
    for cond in ("c1r0", "c1r1"):
        note = re.search(r'<div class="flipnote">majority flipped B &rarr; A \(to right\) at '
                         r'<a href="#([^"]+)">r1t2</a>, after ([^<]*)</div>', body[cond])
        assert note, body[cond][:3000]
        assert "critique[missing_differential]" in html.unescape(note.group(2))
        anchor = note.group(1)
        event = body[cond].split(f'id="{anchor}"', 1)[1].split('<div class="ev ', 1)[0]
        assert 'data-step="turn"' in body[cond].split(f'id="{anchor}"', 1)[1][:200]
        assert 'class="flipnote" data-flip="r1t2"' in event
    for cond in ("c0r0", "c0r1"):
        assert "flipnote" not in body[cond] and "majority: r1t1: B" in body[cond]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (apt-get install chromium)")
def test_chromium_shows_the_transition_figure_in_the_index(grid_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    from matplotlib.image import imread

    build_site(grid_dir, n_boot=200)
    src = (grid_dir / "report" / "index.html").read_text(encoding="utf-8")
    # The index alone, scrolled to the transitions section: a page of its own that keeps only that
    # section, so the screenshot is of the figure the index embeds (same file, same relative path).
    section = src.split('<h2 id="transitions">', 1)[1].split("<h2 ", 1)[0]
    page = grid_dir / "report" / "_transitions_check.html"
    page.write_text("<!doctype html><html><body style='margin:0;background:#fff'><h2>" + section +
                    "<script>window.onload=()=>{const ok=[...document.images].filter(i=>i.complete&&i.naturalWidth>0);"
                    "document.body.dataset.loaded=ok.length;}</script></body></html>", encoding="utf-8")
    try:
        dom = _chromium(["--dump-dom", page.as_uri()], tmp_path)
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert 'data-loaded="5"' in dom.stdout, "a transition figure of the index did not load"
        png = tmp_path / "shot.png"
        shot = _chromium(["--window-size=900,2600", f"--screenshot={png}", page.as_uri()], tmp_path)
        assert shot.returncode == 0, shot.stderr[-2000:]
    finally:
        page.unlink()
    pixels = imread(png)
    # c1 conditions end with 2 right and 1 wrong: the right-green and wrong-red nodes are painted
    assert _near(pixels, COLOURS["right"]) > 500 and _near(pixels, COLOURS["wrong"]) > 500
    assert json.dumps(sorted(COLOURS))  # the palette the figure and the test share
