"""The seed paper's Table 7, for a run of the `benchmark` pipeline (or one of its methods alone).

Two tables and one figure:

- **Benchmark context**: per method, accuracy on each MedAgentsBench subset, their unweighted mean
  (Table 7's "Mean") and the pooled accuracy over every question (the main paper's number) side by
  side, since the two differ whenever the subsets differ in size; then invalid answers and errors
  (counted as wrong, never dropped), tokens and USD per question, and as an anchor the gpt-4o
  reference cost the benchmark's authors logged for the same method (ecosystem notes, section 1.4:
  single runs on the 862 items at $2.5/$10 per M tokens; `-` where they logged none).
- **Paired against the seed's best condition**: each method against the first of `panel-c1r1`,
  `generalist-between-gap`, `panel-c1r0k1` (or their bare slugs) present in the run, on the
  questions both answered (paired bootstrap CI of the difference, exact McNemar).
- **accuracy_vs_cost** (report/plots/, with `--html`): accuracy against tokens per question for
  every method, the Pareto frontier, and for each method the paired 95% CI of its accuracy
  relative to the reference (reference accuracy + the CI of the difference).

Every repeat's rows are counted (a question answered in two repeats counts twice); the paired
table pairs repeat by repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from medpanel.agents.tables import Table
from medpanel.experiments.analysis import plots
from medpanel.experiments.analysis.stats import PairedComparison, paired_comparison
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row

BENCHMARK_PIPELINES = frozenset({"benchmark", "zero-shot", "few-shot", "cot-sc", "multipersona", "self-refine",
                                 "medprompt"})
"""Runs of these pipelines get the Table 7 report (medagents, mdagents, kamac join at merge)."""
SUBSETS = ("medqa", "pubmedqa", "medmcqa", "medbullets", "mmlu", "mmlu-pro", "medexqa", "medxpertqa-r",
           "medxpertqa-u")
"""MedAgentsBench's nine hard subsets in Table 7's column order; other datasets follow, sorted."""
REFERENCES = ("panel-c1r1", "c1r1", "generalist-between-gap", "between-gap", "panel-c1r0k1", "c1r0k1")
"""The seed's best conditions, in the order the paired table looks for one."""
GPT4O_ANCHOR: dict[str, tuple[int, float]] = {
    # method -> (tokens per question, USD per question) for gpt-4o, from the benchmark's stored outputs
    "zero-shot": (284, 0.00073), "direct": (284, 0.00073),
    "few-shot": (1609, 0.00425),
    "cot": (708, 0.00486),
    "cot-sc": (4038, 0.02660), "sc": (4038, 0.02660),
    "self-refine": (2601, 0.01485),
    "multipersona": (5713, 0.03677),
    "medprompt": (8240, 0.03002),
    "medagents": (23516, 0.09137),
    "mdagents": (29848, 0.08345),
}


def applies(record: RunRecord) -> bool:
    return record.named_pipeline in BENCHMARK_PIPELINES


def dataset_order(rows: Sequence[Row]) -> list[str]:
    present = {r.dataset for r in rows}
    return [d for d in SUBSETS if d in present] + sorted(present - set(SUBSETS))


def requested_tokens(r: Row) -> int:
    """The tokens a row's method asked for (its summary's count); a row without one (an error) its sent tokens."""
    value = r.summary.get("requested_tokens")
    return int(value) if isinstance(value, int) else r.tokens


def _pct(k: int, n: int) -> float | str:
    return round(100.0 * k / n, 1) if n else "-"


def context_table(rows: Sequence[Row], conditions: list[str]) -> Table:
    datasets = dataset_order(rows)
    out: list[list[object]] = []
    for cond in conditions:
        sel = [r for r in rows if r.condition == cond]
        if not sel:
            continue
        per = []
        for ds in datasets:
            d = [r for r in sel if r.dataset == ds]
            per.append(_pct(sum(r.correct for r in d), len(d)))
        answered = [p for p in per if isinstance(p, float)]
        mean = round(sum(answered) / len(answered), 1) if answered else "-"
        n = len(sel)
        anchor = GPT4O_ANCHOR.get(cond)
        out.append([cond, *per, mean, _pct(sum(r.correct for r in sel), n), n,
                    sum(r.invalid and not r.error for r in sel), sum(bool(r.error) for r in sel),
                    round(sum(requested_tokens(r) for r in sel) / n, 1), round(sum(r.tokens for r in sel) / n, 1),
                    f"{sum(r.cost_usd for r in sel) / n:.5f}",
                    anchor[0] if anchor else "-", f"{anchor[1]:.5f}" if anchor else "-"])
    return Table("Benchmark context (the seed's Table 7 shape)",
                 ["method", *datasets, "mean_%", "pooled_%", "n", "invalid", "errors", "tokens/q", "sent_tokens/q",
                  "sent_usd/q",
                  "gpt-4o_tokens/q", "gpt-4o_usd/q"], out,
                 note="Per-dataset accuracy in %; mean_% = the unweighted mean of the dataset accuracies (Table 7's "
                      "Mean); pooled_% = correct / all questions (the main paper's figure). Invalid answers and "
                      "errors count as wrong, never dropped. tokens/q = tokens the method requested, cache hits "
                      "included (its price run alone); sent_* = after this run's shared cache (USD needs "
                      "run.prices). gpt-4o_* = the benchmark authors' single gpt-4o run "
                      "(862 items, $2.5/$10 per M tokens), an anchor for the price, not this run's.")


def reference_of(conditions: list[str]) -> str | None:
    return next((c for c in REFERENCES if c in conditions), None)


@dataclass(frozen=True)
class Paired:
    """One method against the reference, in one repeat."""

    method: str
    reference: str
    repeat: int
    cmp: PairedComparison


def paired_rows(rows: Sequence[Row], conditions: list[str], *, n_boot: int = 10000) -> list[Paired]:
    ref = reference_of(conditions)
    out: list[Paired] = []
    if ref is None:
        return out
    for cond in conditions:
        if cond == ref:
            continue
        for rep in sorted({r.repeat for r in rows}):
            ma = {r.key: r.correct for r in rows if r.condition == ref and r.repeat == rep}
            mb = {r.key: r.correct for r in rows if r.condition == cond and r.repeat == rep}
            if ma.keys() & mb.keys():
                c = paired_comparison(ref, ma, cond, mb, n_boot=n_boot)
                out.append(Paired(cond, ref, rep, c))
    return out


def paired_vs_reference_table(rows: Sequence[Row], conditions: list[str], *, n_boot: int = 10000) -> Table | None:
    ref = reference_of(conditions)
    if ref is None:
        return Table("Paired against the seed's best condition", ["note"],
                     [["no seed condition in this run: add variants panel-c1r1 / generalist-between-gap / "
                       "panel-c1r0k1, or use `medpanel compare` against a run that has one"]])
    out = []
    for p in paired_rows(rows, conditions, n_boot=n_boot):
        c = p.cmp
        out.append([p.method, p.reference, p.repeat, c.n, round(100 * c.acc_a, 1), round(100 * c.acc_b, 1),
                    round(c.diff_points, 1), c.ci_text, c.b_only, c.a_only,
                    round(c.p_mcnemar, 4), c.verdict])
    return Table("Paired against the seed's best condition",
                 ["method", "reference", "repeat", "n", "acc_ref_%", "acc_method_%", "diff_pts", "95%_CI_pts",
                  "method_only", "ref_only", "mcnemar_p", "verdict"], out,
                 note="diff = method - reference in points on the questions both answered; CI = paired bootstrap "
                      "over questions; p = exact McNemar on the discordant questions.")


def benchmark_tables(rows: Sequence[Row], conditions: list[str], record: RunRecord, *,
                     n_boot: int = 10000) -> list[Table]:
    if not applies(record) or not rows:
        return []
    tables = [context_table(rows, conditions)]
    paired = paired_vs_reference_table(rows, conditions, n_boot=n_boot)
    return tables + ([paired] if paired else [])


def write_pareto(rows: list[Row], conditions: list[str], out_dir: Path, *, n_boot: int = 10000) -> list[Path]:
    """accuracy_vs_cost.{png,svg}: every method at its tokens per question, with paired CIs."""
    conditions = [c for c in conditions if any(r.condition == c for r in rows)]
    if not conditions:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    ref = reference_of(conditions)
    paired = {p.method: p.cmp for p in paired_rows(rows, conditions, n_boot=n_boot) if p.repeat == 0}
    fig = plots.new_figure(6.0, 4.2)
    ax = fig.add_subplot()
    points: list[tuple[str, float, float]] = []
    for c in conditions:
        sel = [r for r in rows if r.condition == c]
        tokens = sum(requested_tokens(r) for r in sel) / len(sel)
        acc, lo, hi = plots.accuracy_interval(sel, n_boot) if c == ref or c not in paired else (
            100 * paired[c].acc_b, 100 * paired[c].acc_a + paired[c].ci_low, 100 * paired[c].acc_a + paired[c].ci_high)
        points.append((c, tokens, acc))
        ax.errorbar([tokens], [acc], yerr=plots.error_bars([acc], [lo], [hi]), fmt="s" if c == ref else "o", capsize=3,
                    label=c)
        ax.annotate(c, (tokens, acc), textcoords="offset points", xytext=(5, 4), fontsize=7)
    front = plots.pareto_front(points)
    ax.step([p[1] for p in front], [p[2] for p in front], where="post", color="grey", linestyle="--", linewidth=1,
            label="Pareto frontier")
    ax.set_xlabel("tokens per question (requested, cache hits included)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    if min(p[1] for p in points) > 0:
        ax.set_xscale("log")  # methods span two to three orders of magnitude in tokens, as in MedAgentsBench's figure
    else:
        ax.set_xlim(left=0)
    ax.set_title("Accuracy vs cost" + (f" (bars: paired 95% CI vs {ref})" if ref else " (95% bootstrap CI)"))
    ax.legend(fontsize=6)
    return plots.save_figure(fig, out_dir, "accuracy_vs_cost")
