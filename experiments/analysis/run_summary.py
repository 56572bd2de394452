"""The few numbers `medpanel run` ends with: accuracy per condition, the paired verdicts, the cost.

The full tables (`report.build_tables`) are for `medpanel report`; this is what a reader checks
first. Every number is computed from the result rows, as in the report: invalid answers and
errors count as wrong and are shown beside the accuracy; the verdicts are the report's paired
comparisons (same questions, Holm over the comparisons), cut to their estimate, CI and p.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.inference.ledger import LedgerLine
from medpanel.experiments.analysis.report import comparison_pairs, paired_table
from medpanel.experiments.analysis.stats import mean_ci, wilson_ci
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import condition_order

MAX_VERDICTS = 8
"""More comparisons than this (a models or variants axis) are left to the full report."""

ACCURACY_TITLE = "Accuracy and cost per question (invalid/errors scored wrong; sent/q: calls sent, cache hits free)"
VERDICTS_TITLE = "Paired verdicts: b - a in points on the same questions, Holm over {m} comparison{s}"


@dataclass
class RunSummary:
    accuracy: Table
    verdicts: Table | None
    more_verdicts: int = 0
    """Comparisons not shown (over `MAX_VERDICTS`): the full report has them."""


def priced(record: RunRecord) -> bool:
    """Whether the run had prices (run.prices, or a models axis with its own): unpriced USD is unknown, not $0."""
    return bool(record.prices) or any(m.get("prices") for m in record.models)


def accuracy_ci(sel: list[Row]) -> tuple[float, float]:
    """95% CI of a condition's accuracy, in points. One answer per question: the Wilson interval.
    With repeats a question's answers are not independent, so the CI resamples questions, each
    with its mean correctness over its repeats."""
    by_question: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in sel:
        by_question[r.key].append(r.correct)
    if all(len(v) == 1 for v in by_question.values()):
        low, high = wilson_ci(sum(r.correct for r in sel), len(sel))
    else:
        low, high = mean_ci(np.array([np.mean(v) for v in by_question.values()]))
    return 100 * low, 100 * high


def _ci(low: float, high: float) -> str:
    if np.isnan(low):
        return "-"
    if low == high:
        # Every question's mean correctness over the repeats is the same: the bootstrap over
        # questions has nothing to resample, and [x, x] would read as certainty.
        return f"none: {low:.0f}% on every question" if low not in (0, 100) else \
            f"none: all {'right' if low else 'wrong'}"
    return f"[{low:.1f}, {high:.1f}]"


def accuracy_table(rows: list[Row], conditions: list[str], *, usd: bool) -> Table:
    out: list[list[object]] = []
    for cond in conditions:
        sel = [r for r in rows if r.condition == cond]
        n = len(sel)
        k = sum(r.correct for r in sel)
        low, high = accuracy_ci(sel)
        out.append([cond, f"{k}/{n}", f"{100 * k / n:.1f}", _ci(low, high), sum(r.invalid for r in sel),
                    sum(bool(r.error) for r in sel), f"{sum(r.calls for r in sel) / n:.1f}",
                    f"{sum(r.tokens for r in sel) / n:.0f}",
                    f"{sum(r.cost_usd for r in sel) / n:.4f}" if usd else "-"])
    return Table(ACCURACY_TITLE, ["condition", "correct", "acc_%", "95%_CI", "invalid", "errors", "sent/q",
                                  "tokens/q", "usd/q"], out,
                 keep=("condition", "correct", "acc_%", "95%_CI", "invalid", "errors"))


def verdicts_table(rows: list[Row], pairs: list[tuple[str, str]], *, n_boot: int) -> tuple[Table | None, int]:
    """The report's paired comparisons, each as b - a, its CI, Holm p and verdict; (table, not shown)."""
    if not pairs:
        return None, 0
    full = paired_table(rows, pairs, n_boot=n_boot)
    if not full.rows:
        return None, 0
    col = {c: i for i, c in enumerate(full.columns)}
    repeats = len({r[col["repeat"]] for r in full.rows}) > 1
    out = []
    for r in full.rows[:MAX_VERDICTS]:
        out.append([r[col["a"]], r[col["b"]], *([r[col["repeat"]]] if repeats else []), f"{r[col['diff_pts']]:+.1f}",
                    r[col["95%_CI_pts"]], f"{r[col['mcnemar_p_holm']]:.3f}", r[col["verdict"]]])
    columns = ["a", "b", *(["repeat"] if repeats else []), "diff_pts", "95%_CI_pts", "p_holm", "verdict"]
    table = Table(VERDICTS_TITLE.format(m=len(full.rows), s="" if len(full.rows) == 1 else "s"), columns, out,
                  keep=("a", "b", "diff_pts", "95%_CI_pts", "p_holm", "verdict"))
    return table, max(0, len(full.rows) - MAX_VERDICTS)


def run_summary(rows: list[Row], record: RunRecord, *, n_boot: int = 10000) -> RunSummary:
    conditions = condition_order(rows, record.slugs)
    verdicts, more = verdicts_table(rows, comparison_pairs(record, conditions), n_boot=n_boot)
    return RunSummary(accuracy_table(rows, conditions, usd=priced(record) or any(r.cost_usd for r in rows)),
                      verdicts, more)


def batched(record: RunRecord) -> bool:
    """Whether the run sent calls in batches (`model.batch.enabled`, here or on a `models:` block)."""
    blocks = [record.section("model"), *record.models]
    return any(isinstance(b.get("batch"), dict) and b["batch"].get("enabled") for b in blocks)


def batch_line(lines: list[LedgerLine], *, priced: bool) -> str | None:
    """What batching saved, from the cost ledger: None when no batch answered a call."""
    calls = sum(ln.calls for ln in lines)
    batch_calls = sum(ln.batch_calls for ln in lines)
    if not batch_calls:
        return None
    usd = sum(ln.usd for ln in lines)
    saved = sum(ln.usd_saved_by_batch for ln in lines)
    money = (f"; at the batch price they cost ${usd:.4f}, ${saved:.4f} less than sent one by one "
             f"(${usd + saved:.4f})") if priced else "; no run.prices, so no dollars to compare"
    return f"Batches answered {batch_calls} of {calls} requests sent{money}."
