"""Answer-transition figures, PNG + SVG in the house style of `experiments.plots`.

- `transitions_<condition>`: one two-column flow diagram (Sankey-style) per condition, the first
  turn's majority (right / wrong / invalid: a tie or no valid answer) on the left, the final answer
  (right / wrong / invalid / error) on the right; each band's width is its number of questions and
  its colour the final answer's correctness, each node's colour its own.
- `transitions`: every condition as one stacked horizontal bar of the transition table's cells.

Free-text rows (no letters) are not drawn; the table counts them. Every count drawn is also a text
label (kept as text in the SVG), so a test can read the figure back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medpanel.experiments.analysis.plots import new_figure, save_figure
from medpanel.experiments.analysis.trajectory import Trajectory
from medpanel.experiments.analysis.transitions import cell_of, conditions_of
from medpanel.experiments.run.store.files import safe_dir

FIRST = ("right", "wrong", "invalid")
FINAL = ("right", "wrong", "invalid", "error")
COLOURS = {"right": "#54a24b", "wrong": "#e45756", "invalid": "#bab0ac", "error": "#4d4d4d"}
BAR_CELLS = (("right->right", "#2e7d32"), ("wrong->right", "#8bc34a"), ("right->wrong", "#ff8a65"),
             ("wrong->wrong", "#c62828"), ("right->invalid", "#d7ccc8"), ("wrong->invalid", "#bcaaa4"),
             ("invalid->right", "#a5d6a7"), ("invalid->wrong", "#ef9a9a"), ("invalid->invalid", "#9e9e9e"),
             ("errors", "#4d4d4d"))


def flow_counts(ts: Sequence[Trajectory]) -> Counter[tuple[str, str]]:
    """(first state, final state) -> questions, over the scored rows (errors as final `error`)."""
    out: Counter[tuple[str, str]] = Counter()
    for t in ts:
        if not t.scored:
            continue
        first = t.first
        a = "invalid" if first is None or first.state not in ("right", "wrong") else first.state
        b = "error" if t.error else "invalid" if t.final.state not in ("right", "wrong") else t.final.state
        out[(a, b)] += 1
    return out


def _stack(sizes: list[int], gap: float) -> list[tuple[float, float]]:
    """(bottom, top) of each node from the top down, `gap` apart."""
    out, y = [], 0.0
    for s in sizes:
        out.append((y - s, y))
        y -= s + (gap if s else 0.0)
    return out


def _band(ax: Any, x0: float, x1: float, left: tuple[float, float], right: tuple[float, float], colour: str) -> None:
    x = np.linspace(x0, x1, 60)
    s = (1 - np.cos(np.pi * (x - x0) / (x1 - x0))) / 2  # a smooth S from one node to the other
    bottom = left[0] + (right[0] - left[0]) * s
    top = left[1] + (right[1] - left[1]) * s
    ax.fill_between(x, bottom, top, color=colour, alpha=0.55, linewidth=0)


def sankey(ax: Any, flows: Counter[tuple[str, str]], title: str) -> None:
    n = sum(flows.values())
    gap = max(n * 0.04, 0.2)
    left = _stack([sum(v for (a, _b), v in flows.items() if a == s) for s in FIRST], gap)
    right = _stack([sum(v for (_a, b), v in flows.items() if b == s) for s in FINAL], gap)
    lnode = dict(zip(FIRST, left, strict=True))
    rnode = dict(zip(FINAL, right, strict=True))
    lcursor = {s: lnode[s][1] for s in FIRST}
    rcursor = {s: rnode[s][1] for s in FINAL}
    for a in FIRST:  # bands leave each left node in the right nodes' order, so none cross inside a node
        for b in FINAL:
            k = flows.get((a, b), 0)
            if not k:
                continue
            lseg = (lcursor[a] - k, lcursor[a])
            lcursor[a] -= k
            rseg = (rcursor[b] - k, rcursor[b])
            rcursor[b] -= k
            _band(ax, 0.12, 0.88, lseg, rseg, COLOURS[b])
            # At the band's left end: left segments never overlap, so neither do the labels.
            ax.text(0.14, (lseg[0] + lseg[1]) / 2, f"{a} → {b}: {k}", ha="left", va="center", fontsize=7)
    for states, nodes, x, align in ((FIRST, lnode, 0.0, "right"), (FINAL, rnode, 0.88, "left")):
        for s in states:
            lo, hi = nodes[s]
            if hi - lo <= 0:
                continue
            ax.add_patch(_rect(x, lo, 0.12, hi - lo, COLOURS[s]))
            label_x = x - 0.01 if align == "right" else x + 0.13
            ax.text(label_x, (lo + hi) / 2, f"{s} {round(hi - lo)}", ha=align, va="center", fontsize=8)
    ax.set_xlim(-0.25, 1.25)
    ax.set_ylim(min([lo for lo, _hi in left + right] + [-1.0]) - gap, 2.5 * gap)
    ax.text(0.06, gap * 0.4, "first turn", ha="center", va="bottom", fontsize=8)
    ax.text(0.94, gap * 0.4, "final", ha="center", va="bottom", fontsize=8)
    ax.set_axis_off()
    ax.set_title(title, fontsize=9)


def _rect(x: float, y: float, w: float, h: float, colour: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=colour, edgecolor="white", linewidth=0.5)


def _drawn(ts: Sequence[Trajectory], conditions: Sequence[str] | None) -> list[str]:
    """The conditions with a scored row, in the figures' order: each gets a flow diagram."""
    return [c for c in conditions_of(ts, conditions) if any(t.condition == c and t.scored for t in ts)]


def transition_plot_names(ts: Sequence[Trajectory], conditions: Sequence[str] | None = None) -> list[str]:
    """The names (without a suffix) `write_transition_plots` gives its figures, in its order, known
    before they are drawn: the report's index is built while another process draws them."""
    return _names(_drawn(ts, conditions))


def _names(order: list[str]) -> list[str]:
    """The figures' names for the conditions drawn: a flow diagram each, then the bars."""
    return [f"transitions_{safe_dir(cond)}" for cond in order] + (["transitions"] if order else [])


def write_transition_plots(ts: Sequence[Trajectory], out_dir: Path,
                           conditions: Sequence[str] | None = None) -> list[Path]:
    """One flow diagram per condition and the stacked bars of all (`transition_plot_names`);
    returns the files (PNG, SVG)."""
    return write_flow_plots(ts, out_dir, conditions) + write_transition_bars(ts, out_dir, conditions)


def write_flow_plots(ts: Sequence[Trajectory], out_dir: Path, conditions: Sequence[str] | None = None
                     ) -> list[Path]:
    """`write_transition_plots`' flow diagrams, one per condition (the report's index is built, and
    the bars drawn, while another process draws these)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    order = _drawn(ts, conditions)
    for cond, name in zip(order, _names(order), strict=False):
        flows = flow_counts([t for t in ts if t.condition == cond])
        n = sum(flows.values())
        gain = flows[("wrong", "right")] - flows[("right", "wrong")]
        fig = new_figure(5.2, 3.4)
        sankey(fig.add_subplot(), flows, f"{cond}: first-turn majority → final (n={n}, net gain {gain:+d})")
        written += save_figure(fig, out_dir, name)
    return written


def write_transition_bars(ts: Sequence[Trajectory], out_dir: Path, conditions: Sequence[str] | None = None
                          ) -> list[Path]:
    """`write_transition_plots`' stacked bars of every condition's transitions (none without a
    scored row)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    order = _drawn(ts, conditions)
    if order:
        fig = new_figure(7.0, 1.4 + 0.45 * len(order))
        ax = fig.add_subplot()
        labelled: set[str] = set()
        for y, cond in enumerate(order):
            counts = Counter(cell_of(t) for t in ts if t.condition == cond and t.scored)
            total = sum(counts.values())
            left = 0.0
            for cell, colour in BAR_CELLS:
                k = counts.get(cell, 0)
                if not k:
                    continue
                share = 100.0 * k / total
                ax.barh(y, share, left=left, color=colour, edgecolor="white", linewidth=0.5,
                        label=None if cell in labelled else cell)
                labelled.add(cell)
                if share >= 6:
                    ax.text(left + share / 2, y, str(k), ha="center", va="center", fontsize=7)
                left += share
        ax.set_yticks(range(len(order)), order)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("questions (%)")
        ax.set_title("First-turn majority → final answer, per condition")
        # Legend entries in the cells' order, whichever condition drew them first.
        handles, labels = ax.get_legend_handles_labels()
        rank = {cell: i for i, (cell, _c) in enumerate(BAR_CELLS)}
        pairs = sorted(zip(labels, handles, strict=True), key=lambda p: rank[p[0]])
        fig.legend([h for _l, h in pairs], [lab for lab, _h in pairs], loc="outside lower center", fontsize=6,
                   ncols=min(5, len(pairs)))
        written += save_figure(fig, out_dir, _names(order)[-1])
    return written
