"""The 2x2 as a factorial design: main effects, the interaction and simple effects, paired.

For two binary flags a and b (c x r, c x k, r x k) with the other flags held fixed, the four
cells are answered on the same questions. Per question:
- main effect of a = ((a1b0 - a0b0) + (a1b1 - a0b1)) / 2, the a effect averaged over b;
- interaction = (a1b1 - a1b0) - (a0b1 - a0b0), how much b's effect changes when a is on;
- simple effects = the four plain pairs (a at b0, a at b1, b at a0, b at a1).
Each is an accuracy-point estimate with a paired bootstrap CI and an exact p (see contrasts.py),
Holm-adjusted within two families (the three factorial effects; the four simple effects); beside
them the odds ratios of GEE and conditional logit.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from medpanel.experiments.analysis.inference.clustered_logit import OddsRatio, factorial_logit
from medpanel.experiments.analysis.inference.contrasts import Adjusted, adjust, compute_contrasts
from medpanel.experiments.analysis.inference.paired_data import Correctness, align
from medpanel.experiments.analysis.inference.resample import percentile_ci, resample_cell_means

__all__ = ["Factorial", "Grid", "factorial_2x2", "find_grids"]

Cell = tuple[int, int]


@dataclass(frozen=True)
class Grid:
    """Four conditions that differ only in flags a and b; `fixed` holds every other flag."""

    a: str
    b: str
    cells: dict[Cell, str]
    fixed: dict[str, object]

    @property
    def label(self) -> str:
        rest = ", ".join(f"{k}={v}" for k, v in sorted(self.fixed.items()))
        return f"{self.a} x {self.b}" + (f" ({rest})" if rest else "")


def _binary(v: object) -> int | None:
    return int(v) if isinstance(v, int | bool) and int(v) in (0, 1) else None


def find_grids(flags: Mapping[str, Mapping[str, Any]]) -> list[Grid]:
    """Every complete 2x2 among the conditions (slug -> flags, as in run.json).

    A grid needs four conditions equal in every flag but a and b (a `variant` flag included, so
    c1r1k1-ind never stands in for c1r1k1) and taking the four values of (a, b).
    """
    # Flags in order of first appearance (run.json keeps the scenario's c, r, k order).
    names = list(dict.fromkeys(k for f in flags.values() for k, v in f.items() if _binary(v) is not None))
    out = []
    for a, b in itertools.combinations(names, 2):
        groups: dict[tuple[Any, ...], dict[Cell, str]] = {}
        for slug, f in flags.items():
            va, vb = _binary(f.get(a)), _binary(f.get(b))
            if va is None or vb is None:
                continue
            rest = tuple(sorted((k, str(v)) for k, v in f.items() if k not in (a, b)))
            groups.setdefault(rest, {})[(va, vb)] = slug
        for rest, cells in sorted(groups.items()):
            if len(cells) == 4:
                out.append(Grid(a, b, dict(sorted(cells.items())), dict(rest)))
    return out


@dataclass(frozen=True)
class Factorial:
    grid: Grid
    n: int
    repeats: int
    dropped: int
    cell_accuracy: dict[str, tuple[float, float, float]]
    """slug -> (accuracy, CI low, CI high) in points."""
    effects: list[Adjusted]
    odds_ratios: list[OddsRatio]


def _specs(g: Grid) -> list[tuple[str, dict[str, float], tuple[str, str]]]:
    c = g.cells
    a, b = g.a, g.b
    return [
        (f"{a} main effect", {c[1, 0]: 0.5, c[1, 1]: 0.5, c[0, 0]: -0.5, c[0, 1]: -0.5}, (f"{a} helps", f"{a} hurts")),
        (f"{b} main effect", {c[0, 1]: 0.5, c[1, 1]: 0.5, c[0, 0]: -0.5, c[1, 0]: -0.5}, (f"{b} helps", f"{b} hurts")),
        (f"{a} x {b} interaction", {c[1, 1]: 1.0, c[1, 0]: -1.0, c[0, 1]: -1.0, c[0, 0]: 1.0},
         ("super-additive", "sub-additive")),
        (f"{c[1, 0]} - {c[0, 0]} ({a} at {b}0)", {c[1, 0]: 1.0, c[0, 0]: -1.0}, (f"{a} helps", f"{a} hurts")),
        (f"{c[1, 1]} - {c[0, 1]} ({a} at {b}1)", {c[1, 1]: 1.0, c[0, 1]: -1.0}, (f"{a} helps", f"{a} hurts")),
        (f"{c[0, 1]} - {c[0, 0]} ({b} at {a}0)", {c[0, 1]: 1.0, c[0, 0]: -1.0}, (f"{b} helps", f"{b} hurts")),
        (f"{c[1, 1]} - {c[1, 0]} ({b} at {a}1)", {c[1, 1]: 1.0, c[1, 0]: -1.0}, (f"{b} helps", f"{b} hurts")),
    ]


def factorial_2x2(
    data: Correctness,
    grid: Grid,
    *,
    n_boot: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
    alpha: float = 0.05,
    two_level: bool = False,
    models: bool = True,
) -> Factorial:
    """Analyse one grid on the questions all four cells answered in every run.

    Every run is used (per-question mean correctness over the runs); the CIs resample questions
    (`two_level` also resamples runs within them). Two Holm families: the three factorial effects,
    and the four simple effects. `models=False` skips the statsmodels fits.
    """
    slugs = [grid.cells[c] for c in sorted(grid.cells)]
    al = align(data, slugs)
    acc = {s: (np.nan, np.nan, np.nan) for s in al.conditions}
    draws = None
    if al.n:
        two = two_level and al.repeats > 1
        draws = resample_cell_means(al.successes(), al.repeats, n_boot=n_boot, seed=seed, two_level=two)
        lo, hi = percentile_ci(100.0 * draws, level)
        mean = 100.0 * al.y.mean(axis=(1, 2))
        acc = {s: (float(mean[i]), float(lo[i]), float(hi[i])) for i, s in enumerate(al.conditions)}
    contrasts = compute_contrasts(al, _specs(grid), n_boot=n_boot, seed=seed, level=level, two_level=two_level,
                                  cell_draws=draws)
    effects = adjust(contrasts[:3], alpha=alpha) + adjust(contrasts[3:], alpha=alpha)
    ors = factorial_logit(al, grid.cells, (grid.a, grid.b), level=level) if models else []
    return Factorial(grid, al.n, al.repeats, al.dropped, acc, effects, ors)
