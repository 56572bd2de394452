"""Report tables of the model and prompt-variant axes (`experiments/run/scenario/axes.py`).

A condition `c1r1+terse@qwen` is the base condition `c1r1` under prompt variant `terse` on model
`qwen`. Per axis (model, variant) the tables show the base conditions side by side, each contrast
within every level (paired), the level x contrast interaction as a paired difference of differences
with a bootstrap CI, and which conclusions hold at every level.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.stats import paired_comparison, percentile_bootstrap
from medpanel.experiments.run.scenario.axes import split_slug
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row

DEFAULT_PROMPTS = "default"
"""The variant name shown for conditions that run the shipped prompts."""


def _cell(slug: str, axis: str) -> tuple[str, str]:
    """(the condition without this axis, this axis's level)."""
    base, variant, label = split_slug(slug)
    if axis == "model":
        return base + (f"+{variant}" if variant else ""), label or ""
    return base + (f"@{label}" if label else ""), variant or DEFAULT_PROMPTS


def _levels(conditions: Sequence[str], axis: str) -> list[str]:
    return list(dict.fromkeys(_cell(c, axis)[1] for c in conditions))


def _outcomes(rows: list[Row], slug: str, repeat: int) -> dict[object, bool]:
    return {r.key: r.correct for r in rows if r.condition == slug and r.repeat == repeat}


def interaction(a1: dict[object, bool], b1: dict[object, bool], a2: dict[object, bool], b2: dict[object, bool], *,
                n_boot: int = 10000, seed: int = 0) -> tuple[int, float, float, float]:
    """(n, diff of diffs in points, CI low, CI high): (b2 - a2) - (b1 - a1) per question, on the questions
    all four cells answered, with a percentile bootstrap over questions. Small on purpose, so the
    factorial machinery of the statistics module can replace it."""
    keys = sorted(a1.keys() & b1.keys() & a2.keys() & b2.keys(), key=repr)
    if not keys:
        return 0, float("nan"), float("nan"), float("nan")
    d = np.array([(b2[k] - a2[k]) - (b1[k] - a1[k]) for k in keys], dtype=float)
    low, high = percentile_bootstrap(d, n_boot=n_boot, seed=seed, level=0.95)
    return len(keys), 100.0 * float(d.mean()), 100.0 * low, 100.0 * high


def _base_pairs(pairs: Sequence[tuple[str, str]], axis: str) -> list[tuple[str, str]]:
    """Contrasts within one level: the pair's two cells share this axis's level."""
    out = []
    for a, b in pairs:
        (ra, la), (rb, lb) = _cell(a, axis), _cell(b, axis)
        if la == lb and ra != rb:
            out.append((ra, rb))
    return list(dict.fromkeys(out))


def _slug(rest: str, level: str, axis: str) -> str:
    base, variant, label = split_slug(rest)
    if axis == "model":
        return base + (f"+{variant}" if variant else "") + f"@{level}"
    return base + (f"+{level}" if level != DEFAULT_PROMPTS else "") + (f"@{label}" if label else "")


def axis_tables(rows: list[Row], conditions: Sequence[str], pairs: Sequence[tuple[str, str]], axis: str, *,
                n_boot: int = 10000) -> list[Table]:
    """The tables of one axis ("model" or "prompts"); none when the run has fewer than two levels."""
    levels = _levels(conditions, axis)
    name = "model" if axis == "model" else "prompt variant"
    if len(levels) < 2:
        return []
    rests = list(dict.fromkeys(_cell(c, axis)[0] for c in conditions))
    side = []
    for rest in rests:
        line: list[object] = [rest]
        for level in levels:
            sel = [r for r in rows if r.condition == _slug(rest, level, axis)]
            line.append(round(100.0 * sum(r.correct for r in sel) / len(sel), 1) if sel else "")
        side.append(line)
    tables = [Table(f"Accuracy per {name} (%)", ["condition", *levels], side,
                    note=f"Each cell is the condition on that {name}; errors and invalid answers count as wrong.")]
    contrasts = _base_pairs(pairs, axis)
    within, inter, holds = [], [], []
    for ra, rb in contrasts:
        for rep in sorted({r.repeat for r in rows}):
            verdicts = []
            cells = {lv: (_outcomes(rows, _slug(ra, lv, axis), rep), _outcomes(rows, _slug(rb, lv, axis), rep))
                     for lv in levels}
            for lv, (ma, mb) in cells.items():
                if not (ma.keys() & mb.keys()):
                    verdicts.append("")
                    continue
                c = paired_comparison(ra, ma, rb, mb, n_boot=n_boot)
                verdicts.append(c.verdict)
                within.append([lv, ra, rb, rep, c.n, round(100 * c.acc_a, 1), round(100 * c.acc_b, 1),
                               round(c.diff_points, 1), c.ci_text, round(c.p_mcnemar, 4),
                               c.verdict])
            first = levels[0]
            for lv in levels[1:]:
                n, dd, low, high = interaction(*cells[first], *cells[lv], n_boot=n_boot)
                if n:
                    verdict = "differs" if (low > 0 or high < 0) else "no detectable interaction"
                    inter.append([ra, rb, first, lv, rep, n, round(dd, 1), f"[{low:.1f}, {high:.1f}]", verdict])
            same = len(set(verdicts)) == 1 and verdicts[0] != ""
            holds.append([ra, rb, rep, *verdicts, "yes" if same else "no"])
    if within:
        tables.append(Table(f"Condition effects within each {name} (paired)",
                            [name, "a", "b", "repeat", "n", "acc_a_%", "acc_b_%", "diff_pts", "95%_CI_pts",
                             "mcnemar_p", "verdict"], within,
                            note=f"b - a on the same questions, on one {name}; verdicts as in the paired comparisons."))
    if inter:
        tables.append(Table(f"{name.capitalize()} x condition interaction",
                            ["a", "b", "reference", name, "repeat", "n", "diff_of_diffs_pts", "95%_CI_pts", "verdict"],
                            inter,
                            note=f"(b - a on this {name}) - (b - a on the reference), per question, averaged; CI = "
                                 "paired bootstrap over the questions all four cells answered (10,000 resamples)."))
    if holds:
        column = f"holds_on_every_{name.replace(' ', '_')}"
        tables.append(Table(f"Conclusions on every {name}", ["a", "b", "repeat", *levels, column],
                            holds, note=f"yes: the paired verdict is the same on every {name} (a null verdict "
                                        "counts as a verdict)."))
    return tables


def variants_table(record: RunRecord, conditions: Sequence[str]) -> Table | None:
    """The prompt variant of every condition and the prompts it overrides, with their hashes."""
    variants = record.section("prompt_variants")
    shared = record.section("prompts")
    if not variants and not shared:
        return None
    out = []
    for slug in conditions:
        variant = split_slug(slug)[1]
        refs = {**shared, **((variants.get(variant) if variant is not None else None) or {})}
        prompts = "; ".join(f"{k} {v.get('sha256', '')[:12]}" for k, v in sorted(refs.items()) if isinstance(v, dict))
        out.append([slug, variant or DEFAULT_PROMPTS, prompts or "shipped prompts"])
    return Table("Prompt variant of every condition", ["condition", "variant", "overridden prompts (sha256)"], out,
                 note="run.json's scenario keeps each override's file, text and sha256.")


def build(rows: list[Row], record: RunRecord, conditions: Sequence[str], pairs: Sequence[tuple[str, str]], *,
          n_boot: int = 10000) -> list[Table]:
    """Every axis table of a run (none for a run without `models:` or `prompt_variants:`)."""
    tables = axis_tables(rows, conditions, pairs, "model", n_boot=n_boot)
    tables += axis_tables(rows, conditions, pairs, "prompts", n_boot=n_boot)
    named = variants_table(record, conditions)
    return tables + ([named] if named is not None else [])
