"""Tables from a run's store: accuracy per condition x dataset, cost, recruitment, paired statistics.

Everything is computed from the result rows (the record of what was done), never from Optuna's
trial values. The same tables go to the terminal, to CSV and to Markdown under `report/`.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from medpanel.agents.pipelines.registry import UnknownPipeline, built_in, get_pipeline
from medpanel.agents.summary import Summary
from medpanel.agents.tables import OVERALL, Table, TableSpec
from medpanel.experiments.analysis import axes_tables, study
from medpanel.experiments.analysis.digest import RowDigest, gc_frozen
from medpanel.experiments.analysis.digest_workers import read_digests_spread
from medpanel.experiments.analysis.fanout import process_count
from medpanel.experiments.analysis.free_text_pairs import free_text_pair_table
from medpanel.experiments.analysis.inference.contrasts import holm
from medpanel.experiments.analysis.methods import reports
from medpanel.experiments.analysis.stats import NOTHING_TO_TEST, mean_sd, paired_comparisons
from medpanel.experiments.analysis.trajectory_types import Trajectory
from medpanel.experiments.analysis.transitions import call_events, transition_tables
from medpanel.experiments.run.scenario.axes import expand_pairs
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import condition_order


def _pct(k: int, n: int) -> float:
    return 100.0 * k / n if n else 0.0


def accuracy_table(rows: list[Row], conditions: list[str]) -> Table:
    datasets = sorted({r.dataset for r in rows})
    out = []
    for cond in conditions:
        for ds in [*datasets, OVERALL]:
            sel = [r for r in rows if r.condition == cond and (ds == OVERALL or r.dataset == ds)]
            if not sel:
                continue
            n = len(sel)
            k = sum(r.correct for r in sel)
            out.append([cond, ds, n, k, round(_pct(k, n), 1), sum(r.invalid for r in sel),
                        sum(bool(r.error) for r in sel)])
    return Table("Accuracy per condition x dataset", ["condition", "dataset", "n", "correct", "accuracy_%",
                                                      "invalid", "errors"], out,
                 note="Invalid answers (no parseable letter after one re-ask) and errors count as wrong.")


def cost_table(rows: list[Row], conditions: list[str]) -> Table:
    # Dollars and the endpoint's prompt cache get columns once a run has either (priced, or an
    # endpoint that reports cached tokens); runs without them keep the table they always had.
    money = any(r.cost_usd or r.cached_tokens for r in rows)
    out = []
    for cond in conditions:
        sel = [r for r in rows if r.condition == cond]
        n = len(sel)
        calls = sum(r.calls for r in sel)
        logical = sum(r.logical_calls for r in sel)
        line: list[object] = [cond, n, round(calls / n, 2), round(logical / n, 2), logical - calls,
                           round(sum(r.tokens for r in sel) / n, 1), round(sum(r.latency_s for r in sel) / n, 2)]
        if money:
            line += [round(sum(r.cached_tokens for r in sel) / n, 1), round(sum(r.cost_usd for r in sel), 6),
                     round(sum(r.cache_saved_usd for r in sel), 6)]
        out.append(line)
    columns = ["condition", "n", "sent_calls_per_q", "requested_calls_per_q", "calls_saved_by_cache", "tokens_per_q",
               "model_s_per_q"]
    note = ("sent_calls = requests sent to the model; requested_calls = what the pipeline asked for, cache hits "
            "included. The difference is what the shared response cache saved.")
    if money:
        columns += ["prompt_cached_tokens_per_q", "cost_usd", "prompt_cache_saved_usd"]
        note += (" prompt_cached_tokens = prompt tokens the endpoint served from its own prompt cache "
                 "(usage.prompt_tokens_details.cached_tokens), part of tokens; cost_usd prices them at "
                 "run.prices' cached_input, and prompt_cache_saved_usd is what they would have cost more at "
                 "the input price.")
    return Table("Cost per question", columns, out, note=note,
                 keep=("condition", "n", "sent_calls_per_q", "tokens_per_q", "cost_usd"))


def accuracy_compute_table(rows: list[Row], conditions: list[str]) -> Table:
    """Accuracy beside compute per question, so a reader sees whether a gain survives equal compute.

    With budget_match (rows whose summary has `budget`) the reference condition's own compute on the
    same questions is added, in the measure the budget was matched in.
    """
    # Only a summary that holds a budget is read as a model: the others have none to read.
    budgets = {id(r): Summary.view(r.summary).budget if r.summary.get("budget") is not None else None
               for r in rows}
    matched = any(b is not None for b in budgets.values())
    out = []
    for cond in conditions:
        sel = [r for r in rows if r.condition == cond]
        n = len(sel)
        line: list[object] = [cond, n, round(_pct(sum(r.correct for r in sel), n), 1),
                           round(sum(r.logical_calls for r in sel) / n, 2), round(sum(r.tokens for r in sel) / n, 1)]
        if matched:
            refs = [b for b in (budgets[id(r)] for r in sel) if b is not None]
            if refs:
                ref = refs[0].reference
                line += [f"{ref.get('condition', '?')} by {refs[0].by}",
                         round(sum(b.reference["calls"] for b in refs) / len(refs), 2),
                         round(sum(b.reference["tokens"] for b in refs) / len(refs), 1)]
            else:
                line += ["", "", ""]
        out.append(line)
    columns = ["condition", "n", "accuracy_%", "requested_calls_per_q", "tokens_per_q"]
    note = ("requested_calls = model calls the pipeline asked for (re-asks and cache hits included, what a standalone "
            "run would send; the cost table has the calls sent beside them); tokens = tokens sent (cache hits free), "
            "as in the cost table.")
    if matched:
        columns += ["matched_to", "ref_requested_calls_per_q", "ref_tokens_per_q"]
        note += (" ref_* = the reference condition's requested calls and tokens on the questions it budgeted here "
                 "(cache hits included). When every question had a reference, a condition matched by calls has "
                 "requested_calls_per_q = ref_requested_calls_per_q (one more where a last sample was re-asked).")
    return Table("Accuracy and compute", columns, out, note=note)


def default_comparisons(conditions: list[str], flags: Mapping[str, Mapping[str, object]]) -> list[tuple[str, str]]:
    """Pairs that differ in exactly one flag (c0r0 vs c1r0, c1r0 vs c1r1 ...), lower value first."""
    out = []
    for a, b in itertools.combinations(conditions, 2):
        fa, fb = flags.get(a, {}), flags.get(b, {})
        diff = [k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)]
        if len(diff) == 1:
            k = diff[0]
            out.append((a, b) if str(fa.get(k, "")) <= str(fb.get(k, "")) else (b, a))
    return out


def comparison_pairs(record: RunRecord, conditions: list[str]) -> list[tuple[str, str]]:
    """The scenario's `compare` (or the pairs that differ in one flag), within every model and variant."""
    compare = record.compare or default_comparisons(conditions, record.flags)
    return expand_pairs(list(compare), conditions)


def paired_table(rows: list[Row], pairs: list[tuple[str, str]], *, n_boot: int = 10000, seed: int = 0) -> Table:
    asked: list[tuple[str, dict[tuple[str, str], bool], str, dict[tuple[str, str], bool]]] = []
    repeats: list[int] = []
    for a, b in pairs:
        for rep in sorted({r.repeat for r in rows}):
            ma = {r.key: r.correct for r in rows if r.condition == a and r.repeat == rep}
            mb = {r.key: r.correct for r in rows if r.condition == b and r.repeat == rep}
            if set(ma) & set(mb):
                asked.append((a, ma, b, mb))
                repeats.append(rep)
    comps = paired_comparisons(asked, n_boot=n_boot, seed=seed)
    out: list[list[object]] = [[c.a, c.b, rep, c.n, round(100 * c.acc_a, 1), round(100 * c.acc_b, 1),
                                round(c.diff_points, 1), c.ci_text, c.b_only, c.a_only]
                               for c, rep in zip(comps, repeats, strict=True)]
    # Holm over every comparison of the table: with m tests at 0.05 each, the chance of
    # at least one false "better" grows towards 1 - 0.95^m; the verdict reads the adjusted p.
    p_holm = holm([c.p_mcnemar for c in comps])
    for line, c, ph in zip(out, comps, p_holm, strict=True):
        excludes_zero = c.ci_low > 0 or c.ci_high < 0
        verdict = ("no detectable difference" if not (excludes_zero and ph < 0.05)
                   else "b better" if c.diff_points > 0 else "a better")
        if c.b_only + c.a_only == 0:
            verdict = NOTHING_TO_TEST
        line += [round(c.p_mcnemar, 4), round(ph, 4), verdict]
    return Table("Paired comparisons (same questions)", ["a", "b", "repeat", "n", "acc_a_%", "acc_b_%", "diff_pts",
                                                          "95%_CI_pts", "b_only", "a_only", "mcnemar_p",
                                                          "mcnemar_p_holm", "verdict"],
                 out, note="diff = b - a in points; CI = paired bootstrap over questions (10,000 resamples); "
                           "p = exact McNemar test on the discordant questions; p_holm = Holm-adjusted over the "
                           f"{len(out)} comparisons of this table. A difference is reported only when its CI "
                           "excludes 0 and p_holm < 0.05; where no question differs there is nothing to test, and the "
                           "CI and verdict say so.",
                 keep=("a", "b", "diff_pts", "95%_CI_pts", "mcnemar_p_holm", "verdict", "n"))


def repeats_table(rows: list[Row], conditions: list[str]) -> Table | None:
    reps = sorted({r.repeat for r in rows})
    if len(reps) < 2:
        return None
    out = []
    for cond in conditions:
        accs = []
        for rep in reps:
            sel = [r for r in rows if r.condition == cond and r.repeat == rep]
            if sel:
                accs.append(_pct(sum(r.correct for r in sel), len(sel)))
        if accs:
            m, sd = mean_sd(accs)
            out.append([cond, len(accs), round(m, 2), round(sd, 2), " / ".join(f"{a:.1f}" for a in accs)])
    return Table("Repeated runs (accuracy %, mean ± sample sd)", ["condition", "runs", "mean", "sd", "per_run"], out)


def errors_table(rows: list[Row]) -> Table | None:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        if r.error:
            counts[(r.condition, r.error_kind or "unknown")] += 1
    if not counts:
        return None
    return Table("Errors by kind", ["condition", "kind", "count"], [[c, k, n] for (c, k), n in sorted(counts.items())])


def pipeline_tables(record: RunRecord) -> tuple[TableSpec, ...]:
    """The tables of the run's own pipeline (`Pipeline.tables`). A pipeline not installed here adds
    none; a record that names no pipeline (a hand-built one) gets every built-in pipeline's tables,
    each of which applies only to rows that carry its facts."""
    name = record.named_pipeline
    names = built_in() if name is None else [name]  # the panel's first, as always
    specs: list[TableSpec] = []
    for n in names:
        try:
            pipeline = get_pipeline(n)
        except UnknownPipeline:
            continue
        specs += [s for s in pipeline.tables if s not in specs]
    return tuple(specs)


def build_tables(rows: list[Row], record: RunRecord, *, n_boot: int = 10000,
                 digests: Sequence[RowDigest] | None = None, events: study.Events | None = None) -> list[Table]:
    """Every run's tables (accuracy, cost, compute), the pipeline's own, the run-wide ones (repeats,
    errors), the answer transitions when the rows' transcripts are read (`digests`, one per row),
    then the paired comparisons, the model / variant axes, the factorial of every 2x2, repeats over
    every run, Table 3's contrast and the cost (ledger from `events`, a row -> its calls; the
    digests' calls when they are given)."""
    return row_tables(rows, record, n_boot=n_boot).complete(digests, events)


@dataclass(frozen=True)
class RowTables:
    """The tables a run's rows give without its transcripts, built first (in a report read by
    several processes, while the workers read the transcripts); `complete` adds the ones the
    transcripts' digests give, each in its place."""

    rows: list[Row]
    record: RunRecord
    conditions: list[str]
    n_boot: int
    head: list[Table]
    """Accuracy, cost, compute, the pipeline's and each method's: before the transitions."""
    tail: list[Table]
    """The paired comparisons to each method's study tables: after the transitions, before the ledger."""
    usd_per_extra: Table | None

    def complete(self, digests: Sequence[RowDigest] | None = None, events: study.Events | None = None
                 ) -> list[Table]:
        """Every table, in the report's order: the transitions from `digests`, and the ledger from
        `events` (the digests' calls when they are given). Built here, not beside the ledger in a
        forked process: what the two touch of the digests would be copied, each page, into both
        (50 MB more at the peak of the 862 x 4 run, for 0.4 s)."""
        tables = list(self.head)
        if digests is not None:
            tables += transition_tables(digests, self.conditions, scoring=self.record.scoring, n_boot=self.n_boot)
            events = call_events(digests) if events is None else events
        tables += self.tail
        prices = self.record.prices
        lines = study.ledger_lines(self.rows, events, study.prices_of(prices)) if events is not None else []
        return tables + [t for t in (study.ledger_table(lines, self.conditions, bool(prices)), self.usd_per_extra)
                         if t is not None]


def row_tables(rows: list[Row], record: RunRecord, *, n_boot: int = 10000) -> RowTables:
    """The tables of `build_tables` that read no transcript (the first use of the statistics'
    SciPy and the fits' statsmodels among them)."""
    conditions = condition_order(rows, record.slugs)
    specs = pipeline_tables(record)
    tables = [accuracy_table(rows, conditions), cost_table(rows, conditions), accuracy_compute_table(rows, conditions)]
    extra = [spec.build(rows, conditions) for spec in specs if not spec.late]
    extra += [repeats_table(rows, conditions), errors_table(rows)]
    extra += [spec.build(rows, conditions) for spec in specs if spec.late]
    methods = reports()
    extra += [t for m in methods for t in m.tables(rows, conditions, record, n_boot=n_boot)]
    tables += [x for x in extra if x is not None]
    tail: list[Table] = []
    pairs = comparison_pairs(record, conditions)
    if pairs:
        tail.append(paired_table(rows, pairs, n_boot=n_boot))
        free_text = free_text_pair_table(rows, pairs, n_boot=n_boot)
        tail += [free_text] if free_text is not None else []
    tail += axes_tables.build(rows, record, conditions, pairs, n_boot=n_boot)
    tail += [study.factorial_table(f) for f in study.factorials(rows, record.flags, n_boot=n_boot)]
    tail += study.repeat_tables(rows, conditions, pairs, n_boot=n_boot)
    tail += [t for m in methods for t in m.study_tables(rows, conditions, n_boot=n_boot)]
    return RowTables(rows, record, conditions, n_boot, tables, tail, study.usd_per_extra_table(rows, pairs))


@dataclass(frozen=True)
class RunTables:
    """A run's tables with the rows and the digests of their transcripts they were built from, so
    the HTML site that follows `medpanel report` neither reads the transcripts for its figures and
    audit nor builds the tables again."""

    rows: list[Row]
    digests: list[RowDigest]
    tables: list[Table]

    @property
    def trajectories(self) -> list[Trajectory]:
        return [d.trajectory for d in self.digests]

    def matches(self, rows: Sequence[Row]) -> bool:
        """True when `rows` are the rows these were built from (the store did not change between)."""
        return [(*r.key, r.condition, r.repeat) for r in rows] == [(*r.key, r.condition, r.repeat) for r in self.rows]


def read_run_tables(run_dir: Path, rows: list[Row], record: RunRecord, *, processes: int | None = None) -> RunTables:
    """The full report of a run directory (what the CLI prints and writes): every table, the
    transitions and the cost ledger from one streamed read of its transcripts, 10,000 resamples.
    The transcripts are read in `processes` processes (None: `fanout.process_count`'s choice, from
    the CPUs and the rows), this one building the tables of the rows meanwhile."""
    made: list[RowTables] = []
    digests = read_digests_spread(run_dir, rows, scoring=record.scoring, processes=process_count(processes, len(rows)),
                                  meanwhile=lambda: made.append(row_tables(rows, record)))
    with gc_frozen():
        return RunTables(rows, digests, made[0].complete(digests))


def run_tables(run_dir: Path, rows: list[Row], record: RunRecord) -> list[Table]:
    return read_run_tables(run_dir, rows, record).tables


def write_report(run_dir: Path, tables: list[Table]) -> list[Path]:
    report = Confined(run_dir).folder("report")  # a folder of the run's, never a link out of it
    return write_tables(report, tables, title=f"Report: {run_dir.name}", md_name="report.md")


def csv_name(t: Table) -> str:
    """The file a table is written to: `<Table.name>.csv`."""
    return f"{t.name}.csv"


def write_tables(out_dir: Path, tables: list[Table], *, title: str, md_name: str) -> list[Path]:
    """Each table as `<title>.csv`, and all of them in one markdown file, in the folder `out_dir`
    (which exists), written by `confined`: never through a link, never into a file's other names."""
    folder = Confined(out_dir, "a report folder", private=False)
    written = []
    md = [f"# {title}", ""]
    for t in tables:
        written.append(folder.write(csv_name(t), t.csv(), durable=False))
        md.append(t.markdown())
    written.append(folder.write(md_name, "\n".join(md), durable=False))
    return written
