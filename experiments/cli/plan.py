"""`medpanel plan SCENARIO [--pilot RUN_DIR]`: questions needed per planned comparison, and what the
full scenario would cost and take, before paying for it (experiments/analysis/inference/plan.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from medpanel.experiments.analysis.inference.factorial import find_grids
from medpanel.experiments.analysis.inference.ledger import condition_totals
from medpanel.experiments.analysis.inference.paired_data import align, correctness_from_rows
from medpanel.experiments.analysis.inference.plan import (
    CostProfile,
    PlanRow,
    batch_wall_time_s,
    cost_projection,
    plan_2x2,
    wall_time_s,
)
from medpanel.experiments.analysis.inference.power import (
    Discordance,
    detectable_effect,
    mcnemar_power,
    mcnemar_sample_size,
)
from medpanel.experiments.analysis.report import default_comparisons
from medpanel.experiments.analysis.study import ledger_lines, transcript_events
from medpanel.experiments.cli.output import console
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import load_run


def _pair_rows(pairs: list[tuple[str, str]], n: int, effect: float, rate: float, power: float,
               alpha: float) -> list[PlanRow]:
    """Plain pairs outside any 2x2 (one Holm family): exact McNemar at alpha / m."""
    delta = effect / 100
    ap = alpha / max(len(pairs), 1)
    out = []
    for a, b in pairs:
        if rate <= delta:
            raise UserError(f"the discordance rate {rate:.3f} is below the effect {effect:g} points: no pair of "
                            "conditions can differ by more than they disagree. Raise --discordance or lower --effect",
                            field="--effect")
        disc = Discordance((rate + delta) / 2, (rate - delta) / 2)
        try:
            need = mcnemar_sample_size(disc, power=power, alpha=ap)
        except ValueError:
            need = 2**62
        out.append(PlanRow(f"{b} - {a}", "pair", effect, rate, ap, need, n, mcnemar_power(n, disc, alpha=ap),
                           100 * detectable_effect(n, rate, power=power, alpha=ap)))
    return out


def plan(scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
         pilot: Annotated[Path | None, typer.Option("--pilot", help="A finished run of the same conditions: its "
                                                    "discordance rates and per-question costs.")] = None,
         effect: Annotated[float, typer.Option(help="Effect to detect, in accuracy points.")] = 3.0,
         power: Annotated[float, typer.Option(help="Target power.")] = 0.8,
         alpha: Annotated[float, typer.Option(help="Family-wise level (Holm).")] = 0.05,
         accuracy: Annotated[float, typer.Option(help="Without a pilot: the accuracy assumed for every cell.")] = 0.45,
         phi: Annotated[float, typer.Option(help="Without a pilot: the correlation of two cells' correctness on a "
                                                 "question (p_d = 2 p (1 - p) (1 - phi)).")] = 0.5,
         latency: Annotated[float, typer.Option(help="Seconds a model call takes (a pilot gives its own).")] = 2.0,
         limit: Annotated[int | None, typer.Option(help="Questions per subset (overrides dataset.limit).")] = None,
         batch_latency: Annotated[float, typer.Option(
             "--batch-latency", help="Seconds a batch takes to answer (model.batch), for the estimate with "
                                     "batching; the Batch API promises 24 h, most batches take far less.")] = 3600.0,
         ) -> None:
    """Questions each planned comparison needs, and the full scenario's calls, tokens, USD and wall time."""
    for name, v, lo, hi in (("--effect", effect, 0.0, 100.0), ("--power", power, 0.0, 1.0),
                            ("--alpha", alpha, 0.0, 1.0), ("--accuracy", accuracy, 0.0, 1.0),
                            ("--phi", phi, -1.0, 1.0), ("--batch-latency", batch_latency, 0.0, 86400.0 + 1)):
        if not (lo < v < hi) or math.isnan(v):
            raise UserError(f"{name} {v:g} is out of range; give a value between {lo:g} and {hi:g} (exclusive)",
                            field=name)
    sc = load_scenario(scenario, None)
    p = make_plan(sc, base_dir=scenario.parent, limit=limit, file=str(scenario))
    n = len(p.questions)
    slugs = [c.slug for c in p.conditions]
    flags = {c.slug: dict(c.flags) for c in p.conditions}
    pairs = [tuple(x) for x in (sc.compare or default_comparisons(slugs, flags))]
    data: dict[str, Any] | None = None
    rows: list[Row] = []
    if pilot is not None:
        run = load_run(pilot, arg="--pilot")
        rows = run.rows
        missing = [s for s in slugs if s not in {r.condition for r in rows}]
        if not rows or missing:
            raise UserError(f"the pilot {pilot} has no rows for {', '.join(missing) or 'any condition'}; give a run "
                            "of this scenario's conditions (medpanel run SCENARIO --limit 20)", field="--pilot")
        data = correctness_from_rows(rows)
    rate = 2 * accuracy * (1 - accuracy) * (1 - phi)
    source = (f"pilot {pilot} ({len({r.key for r in rows})} questions)" if pilot is not None else
              f"assumed accuracy {accuracy:g}, phi {phi:g} -> discordance p_d = {rate:.3f}")
    console.print(f"plan: {sc.name} on {n} questions, effect {effect:g} points, power {power:g}, alpha {alpha:g} "
                  f"(Holm families); rates from {source}", markup=False, highlight=False)
    grids = find_grids(flags)
    in_grid = {s for g in grids for s in g.cells.values()}
    plans: list[PlanRow] = []
    for g in grids:
        pl = align(data, list(g.cells.values())) if data is not None else None
        plans += plan_2x2(dict(g.cells), n, effect, factors=(g.a, g.b), power=power, alpha=alpha,
                          discordance_rate=None if pl is not None else rate, pilot=pl)
    rest = [(a, b) for a, b in pairs if not (a in in_grid and b in in_grid)]
    if rest:
        if data is not None:
            for a, b in rest:
                al = align(data, [a, b])
                d = float((al.y[0, :, 0] != al.y[1, :, 0]).mean()) if al.n else rate
                plans += _pair_rows([(a, b)], n, effect, d, power, alpha / len(rest))
        else:
            plans += _pair_rows(rest, n, effect, rate, power, alpha)
    console.print(f"  {'comparison':30s} {'kind':8s} {'rate':>6s} {'alpha':>7s} {'n needed':>9s} {'power@n':>8s} "
                  f"{'resolves':>9s}", markup=False, highlight=False)
    for r in plans:
        need = f"{r.n_needed:,}" if r.n_needed < 2**60 else "never"
        det = "none" if math.isnan(r.detectable_pts) else f"{r.detectable_pts:.1f}pt"
        console.print(f"  {r.comparison:30s} {r.kind:8s} {r.rate:6.3f} {r.alpha:7.4f} {need:>9s} {r.power_at_n:8.3f} "
                      f"{det:>9s}", markup=False, highlight=False)
    for r in plans:
        if r.warning:
            console.print(f"warning: {r.comparison}: {r.warning}", markup=False, highlight=False)
    workers = sc.run.workers
    if pilot is None:
        console.print(f"cost: no pilot; run one (medpanel run {scenario} --limit 20) and pass --pilot for calls, "
                      "tokens, USD and wall time", markup=False, highlight=False)
        return
    prices = sc.run.prices
    totals = condition_totals(ledger_lines(rows, transcript_events(pilot), {}))
    per_q = {c: sum(1 for r in rows if r.condition == c) for c in slugs}
    model = next((m for m in prices), "")
    profiles = [CostProfile(c, model, t.calls / per_q[c], t.prompt_tokens / per_q[c], t.completion_tokens / per_q[c])
                for c, t in totals.items() if per_q.get(c)]
    if len(prices) > 1:
        console.print(f"note: several priced models; costs use {model}'s price", markup=False)
    for line in cost_projection(profiles, n, prices, repeats=sc.run.repeats):
        usd = "no price" if math.isnan(line["usd"]) else f"${line['usd']:,.2f}"
        console.print(f"  cost {line['condition']:10s} {line['sent_calls']:12,.0f} calls sent "
                      f"{line['tokens'] / 1e6:9.2f} M tokens {usd}", markup=False, highlight=False)
    calls = sum(r.calls for r in rows)
    lat = sum(r.latency_s for r in rows) / calls if calls else latency
    wall = wall_time_s(profiles, n, latency_s=lat, workers=workers, repeats=sc.run.repeats)
    console.print(f"  wall time at {workers} workers, {lat:.2f} s a call (the pilot's): {wall / 3600:.2f} h",
                  markup=False, highlight=False)
    _with_batching(sc, profiles, n, batch_latency)


def _with_batching(sc: Any, profiles: list[CostProfile], n: int, batch_latency: float) -> None:
    """The same calls in batches (model.batch): every call at the batch price, each step of every
    question in flight a line of the next batch."""
    settings = sc.model.batch
    in_flight = sc.run.workers * sc.run.questions_per_worker
    total = cost_projection(profiles, n, sc.run.prices, repeats=sc.run.repeats, batch=True)[-1]
    direct = cost_projection(profiles, n, sc.run.prices, repeats=sc.run.repeats)[-1]
    wall = batch_wall_time_s(profiles, n, batch_latency_s=batch_latency, max_wait_s=settings.max_wait_s,
                             in_flight=in_flight, repeats=sc.run.repeats)
    usd = "no price" if math.isnan(total["usd"]) else \
        f"${total['usd']:,.2f} (${direct['usd'] - total['usd']:,.2f} less than direct)"
    state = "on" if settings.enabled else "off in this scenario"
    console.print(f"  with batching (model.batch {state}): {usd}; wall time at {in_flight} questions in flight, "
                  f"{batch_latency:g} s a batch + {settings.max_wait_s:g} s to fill it: {wall / 3600:.2f} h",
                  markup=False, highlight=False, soft_wrap=True)  # one line, whatever the terminal's width


def register(app: typer.Typer) -> None:
    app.command()(plan)
