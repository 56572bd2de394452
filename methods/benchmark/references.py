"""The report's published references: their rows in the Table 7 shape, and every condition paired
against each of them on the questions both have.

A reference's items become store rows (`Row`, condition = its name, repeat 0), restricted to the
questions this run answered, so the same code that reads the run reads them: the Table 7 shape from
`benchmark_table.context_table`, the paired statistics from `inference/` (`align`,
`compute_contrasts`, `adjust`: bootstrap CI, exact McNemar, Holm over the whole table) and the
forest plot from `study_plots.forest_plot`. The numbers are the authors' logged ones, nothing is
recomputed: `correct` as logged, tokens as logged, USD as logged (AFlow, SPO) or the logged tokens at
the model's list price (`run.prices` wins).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.inference.contrasts import Adjusted, adjust, compute_contrasts
from medpanel.experiments.analysis.inference.paired_data import align
from medpanel.experiments.analysis.study_plots import forest_plot
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.references import Item, References, read_file, select
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.tracking.budget import Price
from medpanel.methods.benchmark.tables import context_table

PUBLISHED = "published, not run here"
LIST_PRICES = {"gpt-4o": Price(input=2.5, output=10.0), "gpt-4o-mini": Price(input=0.15, output=0.6)}
"""$ per million tokens the benchmark's cost figures use for the OpenAI models (the Table 7 anchor's prices)."""
WORDS = ("condition better", "published better")


@dataclass(frozen=True)
class Reference:
    """A published run on this run's questions."""

    name: str
    model: str
    method: str
    rows: list[Row]
    """Its items on the questions the run answered, as rows of condition `name`, repeat 0."""
    missing: int
    """Questions the run answered that the reference lacks (paired without them)."""
    tokens_logged: bool
    usd: str
    """Where its USD comes from: `logged`, `priced` (tokens x price), or `` (neither)."""


def _usd(item: Item, price: Price | None) -> float | None:
    if item.cost_usd is not None:
        return item.cost_usd
    if price is None or item.prompt_tokens is None or item.completion_tokens is None:
        return None
    return (item.prompt_tokens * price.input + item.completion_tokens * price.output) / 1e6


def _row(name: str, item: Item, price: Price | None) -> Row:
    usd = _usd(item, price)
    tokens = (item.prompt_tokens or 0) + (item.completion_tokens or 0)
    return Row(condition=name, dataset=item.dataset, qid=item.realidx, repeat=0, answer=item.predicted or "",
               gold=item.gold, correct=item.correct, invalid=item.predicted is None, error=None, error_kind=None,
               calls=0, logical_calls=0, tokens=tokens, latency_s=item.time_s or 0.0, summary={}, transcript="",
               cost_usd=usd or 0.0)


def spec_of(record: RunRecord) -> References | None:
    raw = record.scenario.get("references")
    return References.model_validate(raw) if raw else None


def load(rows: Sequence[Row], record: RunRecord) -> tuple[list[Reference], str]:
    """The run's references on its answered questions, and a note (a changed or unreadable file)."""
    spec = spec_of(record)
    if spec is None:
        return [], ""
    try:
        ref = read_file(spec.file)
        chosen = select(spec, ref)
    except UserError as exc:  # the run's own tables still stand; the reference tables say why they are empty
        return [], f"references left out: {exc}"
    note = "" if spec.sha256 in (None, ref.sha256) else (
        f"{ref.path.name} changed since the run was planned (SHA-256 {ref.sha256[:12]}, planned "
        f"{spec.sha256[:12]}). ")
    prices = {**LIST_PRICES, **{m: Price.model_validate(p) for m, p in record.prices.items()}}
    gold = {r.key: r.gold for r in rows}  # as at plan time: an item with another gold letter is another question
    out = []
    for run in spec.runs:
        items = [i for k, i in sorted(chosen[run.name].items()) if gold.get(k) == i.gold]
        price = prices.get(run.model)
        usd = [_usd(i, price) for i in items]
        out.append(Reference(run.name, run.model, run.method, [_row(run.name, i, price) for i in items],
                             missing=len(gold) - len(items),
                             tokens_logged=bool(items) and all(i.prompt_tokens is not None for i in items),
                             usd=("logged" if items and all(i.cost_usd is not None for i in items) else
                                  "priced" if items and all(u is not None for u in usd) else "")))
    return out, note


def published_table(rows: Sequence[Row], refs: Sequence[Reference], note: str) -> Table:
    """One row per reference in the columns of the benchmark context table (the seed's Table 7 shape)."""
    shape = context_table([*rows, *(r for ref in refs for r in ref.rows)], [ref.name for ref in refs])
    cols = shape.columns
    out = []
    for ref, line in zip([ref for ref in refs if ref.rows], shape.rows, strict=True):
        line = list(line)
        for col in ("errors", "gpt-4o_tokens/q", "gpt-4o_usd/q"):
            line[cols.index(col)] = "-"  # not logged / the anchor is a published run itself
        if not ref.tokens_logged:
            line[cols.index("tokens/q")] = line[cols.index("sent_tokens/q")] = "-"
        if not ref.usd:
            line[cols.index("sent_usd/q")] = "-"
        out.append(line)
    empty = [f"{ref.name}: none of this run's questions" for ref in refs if not ref.rows]
    return Table(f"Published references ({PUBLISHED}; the seed's Table 7 shape)", cols, out,
                 note=note + "Each row is a published run read from its per-item log, on this run's answered "
                      "questions; nothing was run here. invalid = items it logged no letter for (scored wrong). "
                      "tokens/q = sent_tokens/q = its logged prompt + completion tokens ('-': it logged a cost "
                      "instead); sent_usd/q = its logged cost (AFlow, SPO) or its logged tokens at the model's "
                      "price (run.prices, else $2.5/$10 per M for gpt-4o, $0.15/$0.60 for gpt-4o-mini); '-': neither. "
                      + ("; ".join(empty) + "." if empty else ""))


@dataclass(frozen=True)
class Pairing:
    condition: str
    reference: str
    repeat: int
    acc_condition: float
    acc_reference: float
    result: Adjusted


def pairings(rows: Sequence[Row], conditions: Sequence[str], refs: Sequence[Reference], *, n_boot: int = 10_000,
             seed: int = 0) -> list[Pairing]:
    """Every condition minus every reference, per repeat, on the questions both have; Holm over them all."""
    found: list[tuple[str, str, int, float, float]] = []
    contrasts = []
    for rep in sorted({r.repeat for r in rows}):
        for cond in conditions:
            mine: dict[Hashable, bool] = {r.key: r.correct for r in rows if r.condition == cond and r.repeat == rep}
            if not mine:
                continue
            for ref in refs:
                theirs: dict[Hashable, bool] = {r.key: r.correct for r in ref.rows}
                al = align({cond: mine, ref.name: theirs}, [ref.name, cond])
                if not al.n:
                    continue
                acc = al.y.mean(axis=(1, 2))
                contrasts += compute_contrasts(al, [(f"{cond} - {ref.name}", {cond: 1.0, ref.name: -1.0}, WORDS)],
                                               n_boot=n_boot, seed=seed)
                found.append((cond, ref.name, rep, 100 * float(acc[1]), 100 * float(acc[0])))
    return [Pairing(c, r, rep, a_c, a_r, adj)
            for (c, r, rep, a_c, a_r), adj in zip(found, adjust(contrasts), strict=True)]


def _ci(lo: float, hi: float, degenerate: str = "") -> str:
    if degenerate:
        return f"none: {degenerate}"  # a [x, x] bootstrap interval is no certainty (Contrast.degenerate)
    return "" if math.isnan(lo) or math.isnan(hi) else f"[{lo:.1f}, {hi:.1f}]"


def paired_table(pairs: Sequence[Pairing]) -> Table:
    out = []
    for p in pairs:
        c = p.result.contrast
        out.append([p.condition, p.reference, p.repeat, c.n, round(p.acc_reference, 1), round(p.acc_condition, 1),
                    round(c.estimate, 1), _ci(c.ci_low, c.ci_high, c.degenerate),
                    _ci(p.result.adj_low, p.result.adj_high, c.degenerate),
                    c.b_only, c.a_only, round(c.p_value, 4), round(p.result.p_holm, 4), p.result.verdict])
    return Table("Paired against the published references",
                 ["condition", "reference", "repeat", "n", "acc_ref_%", "acc_condition_%", "diff_pts", "95%_CI_pts",
                  "adj_CI_pts", "condition_only", "ref_only", "mcnemar_p", "p_holm", "verdict"], out,
                 note=f"diff = condition - reference in points, on the questions both have (n); CI = paired "
                      f"bootstrap over questions; p = exact McNemar on the discordant questions (condition_only, "
                      f"ref_only); p_holm = Holm over the {len(out)} comparisons of this table (the verdict reads "
                      "it); adj CI = their Bonferroni interval. The reference is one published run (repeat 0), "
                      "paired with each repeat of the run.")


def reference_tables(rows: Sequence[Row], conditions: Sequence[str], record: RunRecord, *,
                     n_boot: int = 10_000) -> list[Table]:
    """The report's tables for a run whose scenario names `references:` (none otherwise)."""
    refs, note = load(rows, record)
    if not refs:
        return [Table(f"Published references ({PUBLISHED})", ["note"], [[note]])] if note else []
    missing = [f"{ref.name} lacks {ref.missing} of the run's questions" for ref in refs if ref.missing]
    note += ("; ".join(missing) + ". ") if missing else ""
    return [published_table(rows, refs, note), paired_table(pairings(rows, conditions, refs, n_boot=n_boot))]


def write_reference_forest(rows: list[Row], record: RunRecord, conditions: Sequence[str], out_dir: Path, *,
                           n_boot: int = 10_000) -> list[Path]:
    """forest_references.{png,svg}: each condition (first run) minus each reference, pooled and per dataset."""
    refs, _note = load(rows, record)
    if not refs:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    first = [r for r in rows if r.repeat == 0]
    pairs = [(ref.name, c) for c in conditions for ref in refs]
    return forest_plot([*first, *(r for ref in refs for r in ref.rows)], pairs, out_dir, n_boot=n_boot,
                       name="forest_references", title="Minus published runs")
