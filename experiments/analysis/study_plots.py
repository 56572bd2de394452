"""The study's figures (PNG + SVG under report/plots/, drawn as in `plots.py`):

- `forest`: every paired difference b - a with its 95% CI (thick) and its Holm-family
  (Bonferroni) CI (thin), per dataset and pooled; the standard picture of an ablation;
- `interaction_<a>x<b>`: for each 2x2 of flags, the accuracy of the b0 and b1 lines across a0
  and a1, with the cells' 95% CIs; parallel lines mean no interaction.
"""

from __future__ import annotations

from pathlib import Path

from medpanel.experiments.analysis.inference.contrasts import Adjusted, pair_family
from medpanel.experiments.analysis.inference.factorial import Factorial
from medpanel.experiments.analysis.inference.paired_data import correctness_from_rows
from medpanel.experiments.analysis.plots import new_figure, save_figure
from medpanel.experiments.analysis.study import factorials
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row

POOLED = "pooled"


def forest_data(rows: list[Row], pairs: list[tuple[str, str]], *, n_boot: int) -> list[tuple[str, Adjusted]]:
    """(dataset or pooled, comparison) for each pair, each dataset a Holm family of its own."""
    out: list[tuple[str, Adjusted]] = []
    datasets = sorted({r.dataset for r in rows})
    groups = [(POOLED, rows)] + ([(d, [r for r in rows if r.dataset == d]) for d in datasets] if len(datasets) > 1
                                 else [])
    for name, sel in groups:
        data = correctness_from_rows(sel)
        ok = [(a, b) for a, b in pairs if a in data and b in data]
        out += [(name, e) for e in pair_family(data, ok, n_boot=n_boot)] if ok else []
    return out


def forest_plot(rows: list[Row], pairs: list[tuple[str, str]], out_dir: Path, *, n_boot: int, name: str = "forest",
                title: str = "Paired differences") -> list[Path]:
    items = [(g, e) for g, e in forest_data(rows, pairs, n_boot=n_boot) if e.contrast.n]
    if not items:
        return []
    fig = new_figure(7.5, 0.9 + 0.32 * len(items))
    ax = fig.add_subplot()
    ys = list(range(len(items)))[::-1]
    for y, (_group, e) in zip(ys, items, strict=True):
        c = e.contrast
        colour = "tab:red" if e.verdict not in ("no detectable difference", "not tested") else "tab:blue"
        ax.plot([e.adj_low, e.adj_high], [y, y], color=colour, linewidth=1, alpha=0.6)
        ax.plot([c.ci_low, c.ci_high], [y, y], color=colour, linewidth=3.5)
        ax.plot([c.estimate], [y], "o", color="black", markersize=4)
    ax.axvline(0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(ys, [f"{g}: {e.contrast.name}  (p={e.contrast.p_value:.3g}, Holm {e.p_holm:.3g})"
                       for g, e in items], fontsize=8)
    ax.set_xlabel("difference b - a (accuracy points)")
    ax.set_title(f"{title}, pooled and per dataset\n95% CI thick, Holm-family CI thin; red: Holm p < 0.05",
                 fontsize=10)
    return save_figure(fig, out_dir, name)


def interaction_plot(f: Factorial, out_dir: Path) -> list[Path]:
    g = f.grid
    fig = new_figure(5.0, 3.8)
    ax = fig.add_subplot()
    for fb, style in ((0, "o-"), (1, "s--")):
        acc = [f.cell_accuracy[g.cells[fa, fb]] for fa in (0, 1)]
        means = [a for a, _lo, _hi in acc]
        err = [[max(a - lo, 0.0) if lo == lo else 0.0 for a, lo, _ in acc],
               [max(hi - a, 0.0) if hi == hi else 0.0 for a, _, hi in acc]]
        ax.errorbar([0, 1], means, yerr=err, fmt=style, capsize=4, label=f"{g.b}{fb}")
    ax.set_xticks([0, 1], [f"{g.a}0", f"{g.a}1"])
    ax.set_xlim(-0.3, 1.3)
    ax.set_ylabel("accuracy % (95% CI)")
    ax.set_title(f"Interaction {g.label} (n={f.n})", fontsize=10)
    ax.legend(title=g.b)
    fixed = "".join(f"_{k}{v}" for k, v in sorted(g.fixed.items()))
    return save_figure(fig, out_dir, f"interaction_{g.a}x{g.b}{fixed}")


def write_study_plots(rows: list[Row], record: RunRecord, pairs: list[tuple[str, str]], out_dir: Path, *,
                      n_boot: int = 10_000) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = forest_plot(rows, pairs, out_dir, n_boot=n_boot)
    for f in factorials(rows, record.flags, n_boot=n_boot, models=False):
        if f.n:
            paths += interaction_plot(f, out_dir)
    return paths
