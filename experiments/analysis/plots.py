"""Figures of a run (matplotlib, PNG + SVG under report/plots/).

- accuracy per condition with percentile-bootstrap 95% CIs (`stats.accuracy_ci`, the same
  statistic as the tables);
- accuracy per dataset x condition;
- calls (sent and requested) and tokens per question, per condition;
- accuracy against calls per question, with the Pareto frontier (MedAgentsBench-style).

Figures are drawn on `matplotlib.figure.Figure` objects with the Agg canvas directly, never via
pyplot, so nothing global (the backend, open figures) changes and threads are safe.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

from medpanel.experiments.analysis.stats import accuracy_cis
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.rows import Row

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOTS = ("accuracy_by_condition", "accuracy_by_dataset", "cost_by_condition", "accuracy_vs_calls")
FORMATS = ("png", "svg")


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as Drawn  # matplotlib imported when a figure is drawn, not before

    fig = Drawn(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, out_dir: Path, name: str) -> list[Path]:
    import matplotlib as mpl

    out = []
    # Text stays text in SVGs; a fixed hash salt makes the element ids reproducible.
    with mpl.rc_context({"svg.hashsalt": "medpanel", "svg.fonttype": "none"}):
        for fmt in FORMATS:
            # No dates in the files: rebuilding an unchanged run gives identical plots.
            metadata = {"Date": None} if fmt == "svg" else {"Software": None}
            buffer = io.BytesIO()
            fig.savefig(buffer, format=fmt, metadata=metadata)
            # Drawn in memory, then written by `confined`: never through a link in the folder.
            folder = Confined(out_dir, "a report folder", private=False)
            out.append(folder.write(f"{name}.{fmt}", buffer.getvalue(), durable=False))
    return out


def accuracy_interval(sel: list[Row], n_boot: int) -> tuple[float, float, float]:
    """Accuracy and CI in percent; the CI is nan below two questions (no interval to draw)."""
    return accuracy_intervals([sel], n_boot)[0]


def accuracy_intervals(groups: list[list[Row]], n_boot: int) -> list[tuple[float, float, float]]:
    """`accuracy_interval` of each group, from one bootstrap call (`stats.accuracy_cis`)."""
    return [(100 * acc, 100 * lo, 100 * hi)
            for acc, lo, hi in accuracy_cis([[r.correct for r in sel] for sel in groups], n_boot=n_boot)]


def error_bars(accs: list[float], los: list[float], his: list[float]) -> list[list[float]]:
    return [[0.0 if math.isnan(lo) else max(a - lo, 0.0) for a, lo in zip(accs, los, strict=True)],
            [0.0 if math.isnan(hi) else max(hi - a, 0.0) for a, hi in zip(accs, his, strict=True)]]


def pareto_front(points: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """(label, cost, accuracy) points not dominated by a cheaper-or-equal, at-least-as-accurate one."""
    front: list[tuple[str, float, float]] = []
    for p in sorted(points, key=lambda p: (p[1], -p[2])):
        if not front or p[2] > front[-1][2]:
            front.append(p)
    return front


def write_plots(rows: list[Row], conditions: list[str], out_dir: Path, *, n_boot: int = 10000) -> list[Path]:
    """Draw every plot for these rows; returns the files written (PNG and SVG of each)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    conditions = [c for c in conditions if any(r.condition == c for r in rows)]
    if not conditions:
        return []
    datasets = sorted({r.dataset for r in rows})
    by_cond = {c: [r for r in rows if r.condition == c] for c in conditions}
    stats = dict(zip(by_cond, accuracy_intervals(list(by_cond.values()), n_boot), strict=True))
    written: list[Path] = []
    x = list(range(len(conditions)))
    width = max(4.5, 0.9 * len(conditions) + 2)

    fig = new_figure(width, 3.4)
    ax = fig.add_subplot()
    accs = [stats[c][0] for c in conditions]
    ax.bar(x, accs, yerr=error_bars(accs, [stats[c][1] for c in conditions], [stats[c][2] for c in conditions]),
           capsize=4, color="#4c78a8")
    for i, c in enumerate(conditions):
        ax.text(i, 1, f"n={len(by_cond[c])}", ha="center", va="bottom", fontsize=7, color="white")
    ax.set_xticks(x, conditions, rotation=30 if len(conditions) > 6 else 0)
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy per condition (95% bootstrap CI)")
    written += save_figure(fig, out_dir, "accuracy_by_condition")

    fig = new_figure(max(5.0, 1.2 * len(datasets) * max(1, len(conditions)) * 0.45 + 2), 3.6)
    ax = fig.add_subplot()
    bw = 0.8 / len(conditions)
    cells = {(c, ds): [r for r in by_cond[c] if r.dataset == ds] for c in conditions for ds in datasets}
    cells = {k: sel for k, sel in cells.items() if sel}
    intervals = dict(zip(cells, accuracy_intervals(list(cells.values()), n_boot), strict=True))
    for j, c in enumerate(conditions):
        xs, ys, los, his = [], [], [], []
        for i, ds in enumerate(datasets):
            if (c, ds) not in intervals:
                continue
            a, lo, hi = intervals[(c, ds)]
            xs.append(i - 0.4 + bw * (j + 0.5))
            ys.append(a)
            los.append(lo)
            his.append(hi)
        ax.bar(xs, ys, width=bw, yerr=error_bars(ys, los, his), capsize=2, label=c)
    ax.set_xticks(range(len(datasets)), datasets, rotation=30 if len(datasets) > 4 else 0)
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy per dataset x condition")
    ax.legend(fontsize=7, ncols=min(4, len(conditions)))
    written += save_figure(fig, out_dir, "accuracy_by_dataset")

    fig = new_figure(width * 1.6, 3.2)
    ax1, ax2 = fig.subplots(1, 2)
    sent = [sum(r.calls for r in by_cond[c]) / len(by_cond[c]) for c in conditions]
    asked = [sum(r.logical_calls for r in by_cond[c]) / len(by_cond[c]) for c in conditions]
    tokens = [sum(r.tokens for r in by_cond[c]) / len(by_cond[c]) for c in conditions]
    ax1.bar([i - 0.2 for i in x], asked, width=0.4, label="requested", color="#9ecae9")
    ax1.bar([i + 0.2 for i in x], sent, width=0.4, label="sent", color="#4c78a8")
    ax1.set_xticks(x, conditions)
    ax1.set_ylabel("model calls per question")
    ax1.legend(fontsize=7)
    ax1.set_title("Calls (requested includes cache hits)")
    ax2.bar(x, tokens, color="#f58518")
    ax2.set_xticks(x, conditions)
    ax2.set_ylabel("tokens per question")
    ax2.set_title("Tokens sent to the model")
    written += save_figure(fig, out_dir, "cost_by_condition")

    fig = new_figure(5.2, 3.8)
    ax = fig.add_subplot()
    points = [(c, s, stats[c][0]) for c, s in zip(conditions, sent, strict=True)]
    for c, s, a in points:
        _, lo, hi = stats[c]
        ax.errorbar([s], [a], yerr=error_bars([a], [lo], [hi]), fmt="o", capsize=3, label=c)
        ax.annotate(c, (s, a), textcoords="offset points", xytext=(5, 4), fontsize=7)
    front = pareto_front(points)
    ax.step([p[1] for p in front], [p[2] for p in front], where="post", color="grey", linestyle="--", linewidth=1,
            label="Pareto frontier")
    ax.set_xlabel("model calls per question (sent)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    ax.set_xlim(left=0)
    ax.set_title("Accuracy vs cost")
    ax.legend(fontsize=7)
    written += save_figure(fig, out_dir, "accuracy_vs_calls")
    return written
