"""The report's study tables: the factorial of every two-flag grid with its odds ratios,
Holm-adjusted comparisons, repeats over every run, the cost ledger, and (between them) the methods' own
contrasts (`MethodReport.study_tables`).

Every table reads the result rows (and, for the ledger, the transcripts' call events) through
`experiments/analysis/inference/`; docs/statistics.md says what each interval resamples and
which test gives each p. Invalid answers and errors are rows scored wrong: counted, never dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.inference.clustered_logit import GEE_MODEL, LOGIT_MODEL, OddsRatio
from medpanel.experiments.analysis.inference.contrasts import Adjusted, Contrast, pair_family
from medpanel.experiments.analysis.inference.factorial import Factorial, factorial_2x2, find_grids
from medpanel.experiments.analysis.inference.ledger import (
    LedgerLine,
    PriceLike,
    condition_totals,
    ledger,
    usd_per_extra_correct,
)
from medpanel.experiments.analysis.inference.paired_data import correctness_from_rows
from medpanel.experiments.analysis.inference.repeats import repeat_summary
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import read_document, transcript_path
from medpanel.experiments.run.tracking.budget import Price

Events = Callable[[Row], Iterable[object]]
"""A row -> the call events of its transcript (empty when the transcript is missing)."""


def _r(x: float, d: int = 1) -> float | str:
    return "" if x is None or math.isnan(x) else round(x, d)


def _ci(lo: float, hi: float) -> str:
    return "" if math.isnan(lo) or math.isnan(hi) else f"[{lo:.1f}, {hi:.1f}]"


def _contrast_ci(c: Contrast, lo: float, hi: float) -> str:
    return f"none: {c.degenerate}" if c.degenerate else _ci(lo, hi)


def _spread_ci(lo: float, hi: float) -> str:
    """An accuracy's bootstrap CI, or in words why it has no width: every question scored the same."""
    return "none: the same on every question" if lo == hi else _ci(lo, hi)


def _p(p: float | None) -> float | str:
    return "" if p is None or math.isnan(p) else round(p, 4)


def _or(o: OddsRatio | None) -> str:
    if o is None:
        return ""
    if math.isnan(o.odds_ratio):
        return f"n/a ({o.note})" if o.note else "n/a"
    return f"{o.odds_ratio:.2f} [{o.ci_low:.2f}, {o.ci_high:.2f}] p={o.p_value:.3g}"


def factorials(rows: list[Row], flags: Mapping[str, Mapping[str, object]], *, n_boot: int = 10_000,
               models: bool = True) -> list[Factorial]:
    """The factorial analysis of every complete 2x2 of binary flags among the run's conditions."""
    present = {r.condition for r in rows}
    grids = find_grids({s: f for s, f in flags.items() if s in present})
    if not grids:
        return []
    data = correctness_from_rows(rows)
    return [factorial_2x2(data, g, n_boot=n_boot, models=models) for g in grids]


def factorial_table(f: Factorial) -> Table:
    """Main effects, the interaction and the four simple effects, each with its bootstrap CI,
    exact p (raw and Holm within its family) and verdict; the models' odds ratios beside the
    three factorial effects (GEE population-averaged, conditional logit question-specific)."""
    g = f.grid
    ors: dict[tuple[str, int], OddsRatio] = {}
    for o in f.odds_ratios:
        ors[(o.model, [f"{g.a} (main)", f"{g.b} (main)", f"{g.a} x {g.b} (ratio of ORs)"].index(o.term))] = o
    out = []
    for i, e in enumerate(f.effects):
        c = e.contrast
        family = "factorial (3)" if i < 3 else "simple effects (4)"
        out.append([c.name, family, c.n, c.repeats, _r(c.estimate), _contrast_ci(c, c.ci_low, c.ci_high),
                    _contrast_ci(c, e.adj_low, e.adj_high), c.test, _p(c.p_value), _p(e.p_holm), e.verdict,
                    _or(ors.get((GEE_MODEL, i))) if i < 3 else "", _or(ors.get((LOGIT_MODEL, i))) if i < 3 else ""])
    cells = ", ".join(f"{s} {a:.1f}%" for s, (a, _lo, _hi) in f.cell_accuracy.items())
    note = (f"Cells on the {f.n} questions all four answered in every run ({cells}; {f.dropped} left out). "
            "Estimates in accuracy points; main effect = mean of its two simple effects; interaction = "
            f"({g.cells[1, 1]} - {g.cells[1, 0]}) - ({g.cells[0, 1]} - {g.cells[0, 0]}). CI = paired bootstrap "
            "over questions; adj CI = Bonferroni level of the family; p_holm = Holm within the family (the "
            "verdict reads it). OR = odds ratio [95% CI]: GEE (exchangeable within question, robust SE) and "
            "conditional logit (question as stratum); flags coded -1/2, +1/2.")
    return Table(f"Factorial {g.label}", ["effect", "family", "n", "runs", "estimate_pts", "95%_CI_pts",
                                          "adj_CI_pts", "test", "p_raw", "p_holm", "verdict", "OR_GEE",
                                          "OR_clogit"], out, note=note,
                 keep=("effect", "estimate_pts", "95%_CI_pts", "p_holm", "verdict"))


def family_rows(adjusted: Sequence[Adjusted]) -> list[list[object]]:
    out = []
    for e in adjusted:
        c = e.contrast
        out.append([c.name, c.n, c.repeats, _r(c.estimate), _contrast_ci(c, c.ci_low, c.ci_high),
                    _contrast_ci(c, e.adj_low, e.adj_high),
                    "" if c.b_only is None else c.b_only, "" if c.a_only is None else c.a_only, c.test,
                    _p(c.p_value), _p(e.p_holm), e.verdict])
    return out


FAMILY_COLUMNS = ["contrast", "n", "runs", "diff_pts", "95%_CI_pts", "adj_CI_pts", "b_only", "a_only", "test",
                  "p_raw", "p_holm", "verdict"]
FAMILY_KEEP = ("contrast", "diff_pts", "95%_CI_pts", "p_holm", "verdict")
"""What a narrow terminal shows of a comparison family: the estimate, its CI and the verdict."""


def repeat_tables(rows: list[Row], conditions: list[str], pairs: list[tuple[str, str]], *,
                  n_boot: int = 10_000) -> list[Table]:
    """With K > 1 runs: per condition the question-level and two-level CIs, flip rate and pass^K;
    then every comparison over all K runs (per-question mean correctness, exact sign-flip test)."""
    if len({r.repeat for r in rows}) < 2:
        return []
    data = correctness_from_rows(rows)
    summ = repeat_summary(data, [c for c in conditions if c in data], n_boot=n_boot)
    k = max(s.repeats for s in summ) if summ else 0
    out = [[s.condition, s.n, s.repeats, _r(s.accuracy, 2), _spread_ci(s.ci_low, s.ci_high),
            _spread_ci(s.ci2_low, s.ci2_high),
            _r(s.run_sd, 2), s.flips, _r(100 * s.flip_rate), _r(s.pass_all), s.dropped] for s in summ]
    tables = [Table("Repeats over every run", ["condition", "n", "runs", "accuracy_%", "95%_CI_questions",
                                               "95%_CI_two_level", "run_sd", "flips", "flip_rate_%",
                                               f"pass^{k}_%", "dropped"], out,
                    note="On the questions answered in every run. CI_questions resamples questions (each with its "
                         "mean over the runs); CI_two_level resamples questions, then runs within each. flips = "
                         "questions whose correctness changes across runs; pass^k = right in every run.")]
    pairs = [(a, b) for a, b in pairs if a in data and b in data]
    if pairs:
        fam = pair_family(data, pairs, n_boot=n_boot)
        tables.append(Table("Paired comparisons over every run", FAMILY_COLUMNS, family_rows(fam),
                            note="diff = b - a; each question's mean correctness over its runs, paired over "
                                 "questions; exact sign-flip test; Holm over the comparisons (verdict).",
                            keep=FAMILY_KEEP))
    return tables


def ledger_lines(rows: list[Row], events: Events, prices: Mapping[str, PriceLike]) -> list[LedgerLine]:
    per: dict[str, list[object]] = {}
    for r in rows:
        per.setdefault(r.condition, []).extend(events(r))
    return ledger(per, prices)


def ledger_table(lines: list[LedgerLine], conditions: list[str], priced: bool) -> Table | None:
    if not lines:
        return None
    order = {c: i for i, c in enumerate(conditions)}
    lines = sorted(lines, key=lambda ln: (order.get(ln.condition, len(order)), ln.role, ln.step))
    # The batch columns only where a batch answered calls: a run without batches keeps its table as it was.
    batched = any(ln.batch_calls for ln in lines)

    def cells(ln: LedgerLine, role: str, step: str) -> list[object]:
        return [ln.condition, role, step, ln.calls, ln.prompt_tokens, ln.completion_tokens, round(ln.usd, 4),
                ln.cache_hits, ln.cache_prompt_tokens + ln.cache_completion_tokens, round(ln.usd_saved, 4), ln.failed,
                *([ln.batch_calls, round(ln.usd_saved_by_batch, 4)] if batched else [])]

    out = [cells(ln, ln.role, ln.step) for ln in lines]
    out += [cells(t, "all", "all") for t in condition_totals(lines).values()]
    note = ("Every model call of every role and step (orchestration included). calls = requests sent (re-asks and "
            "retries included); cache_* = calls the shared response cache answered, sent nothing and cost nothing "
            "(usd_saved = what they would have cost).")
    if batched:
        note += (" batch_calls = requests a batch answered (model.batch), priced at the batch price; "
                 "usd_saved_by_batch = what they would have cost more sent one by one.")
    if not priced:
        note += " No run.prices: every USD is 0."
    return Table("Cost ledger per role and step", ["condition", "role", "step", "calls", "prompt_tokens",
                                                   "completion_tokens", "usd", "cache_hits", "cache_tokens",
                                                   "usd_saved", "failed",
                                                   *(["batch_calls", "usd_saved_by_batch"] if batched else [])],
                 out, note=note)


def usd_per_extra_table(rows: list[Row], pairs: list[tuple[str, str]]) -> Table | None:
    """Dollars b spends beyond a per answer b gets right beyond a, on the (question, run) pairs both have."""
    if not pairs:
        return None
    by: dict[str, dict[object, Row]] = {}
    for r in rows:
        by.setdefault(r.condition, {})[(r.key, r.repeat)] = r
    out = []
    for a, b in pairs:
        common = by.get(a, {}).keys() & by.get(b, {}).keys()
        ra = [by[a][k] for k in common]
        rb = [by[b][k] for k in common]
        ua, ub = sum(r.cost_usd for r in ra), sum(r.cost_usd for r in rb)
        ka, kb = sum(r.correct for r in ra), sum(r.correct for r in rb)
        value, why = usd_per_extra_correct(ua, ka, ub, kb)
        out.append([a, b, len(common), round(ua, 4), round(ub, 4), ka, kb, kb - ka,
                    "" if math.isnan(value) else round(value, 4), why])
    return Table("USD per extra correct answer", ["a", "b", "n", "usd_a", "usd_b", "correct_a", "correct_b",
                                                  "extra_correct", "usd_per_extra_correct", "note"], out,
                 note="(usd_b - usd_a) / (correct_b - correct_a) on the same questions and runs; usd = the run's own "
                      "spend per row (cache hits free).")


def prices_of(raw: Mapping[str, object]) -> dict[str, Price]:
    """run.json's `scenario.run.prices` (model -> {input, output} $ per million tokens) as Prices."""
    return {m: Price.model_validate(p) for m, p in raw.items()}


def transcript_events(run_dir: Path) -> Events:
    """Row -> its transcript's call events, read from the run directory (none when it is missing)."""

    def events(row: Row) -> list[dict[str, object]]:
        path = transcript_path(run_dir, row)
        if not row.transcript or not path.is_file():
            return []
        # read_document: a damaged file or log record is one UserError naming it; events are read
        # raw (no model validation) because the ledger needs five fields of each and a report reads
        # thousands.
        doc = read_document(path)
        events = doc.get("events") if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise UserError("not a medpanel transcript (no events list). Restore it from a backup", file=str(path))
        return [e for e in events if isinstance(e, dict) and e.get("kind") == "call"]

    return events
