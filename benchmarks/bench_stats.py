"""Benchmark: the study statistics on a scripted 862 x 4 run, with 1 and with 5 runs a question.

    python -m benchmarks.bench_stats [--questions 862] [--boot 10000] [--repeats 1 5]

Store-like rows (condition, key, repeat, correct, cost) are drawn from the synthetic-study model
(hard-set accuracies near the seed paper's GPT-4o-mini 2x2); every statistic a report would show
is then timed: the rows -> aligned arrays, the factorial table (10,000 resamples, exact tests,
GEE and conditional logit), the paired comparisons of the scenario's four pairs, Table 3's
contrast, the repeats table, the 2x2 plan and a ledger over 30 call events a question. The target
is the issue's: the whole report in <= 10 s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from medpanel.agents.types import TranscriptEvent, Usage
from medpanel.experiments.analysis.inference.contrasts import pair_family
from medpanel.experiments.analysis.inference.factorial import factorial_2x2, find_grids
from medpanel.experiments.analysis.inference.ledger import condition_totals, ledger
from medpanel.experiments.analysis.inference.paired_data import align, correctness_from_rows
from medpanel.experiments.analysis.inference.plan import CostProfile, cost_projection, plan_2x2, wall_time_s
from medpanel.experiments.analysis.inference.repeats import repeat_summary
from medpanel.experiments.analysis.inference.simulate import Design, logits_for, simulate
from medpanel.experiments.run.tracking.budget import Price
from medpanel.methods.panel.contrast import channel_addition

CONDITIONS = ("c0r0", "c0r1", "c1r0", "c1r1")
FLAGS = {"c0r0": {"c": 0, "r": 0}, "c0r1": {"c": 0, "r": 1}, "c1r0": {"c": 1, "r": 0}, "c1r1": {"c": 1, "r": 1}}
PAIRS = [("c0r0", "c1r0"), ("c1r0", "c1r1"), ("c0r0", "c0r1"), ("c0r1", "c1r1")]
TARGET_S = 10.0


@dataclass
class _Row:
    condition: str
    dataset: str
    qid: str
    repeat: int
    correct: bool
    cost_usd: float

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.qid)


def scripted_rows(n: int, repeats: int, seed: int = 0) -> list[_Row]:
    design = Design(CONDITIONS, logits_for([0.176, 0.174, 0.205, 0.216], 2.0, 1.0), 2.0, 1.0, repeats)
    y = simulate(design, n, 1, seed)[0]  # (conditions, questions, runs)
    return [_Row(c, f"ds{q % 9}", str(q), k, bool(y[i, q, k]), 0.002)
            for i, c in enumerate(CONDITIONS) for q in range(n) for k in range(repeats)]


def _events(n: int) -> dict[str, list[TranscriptEvent]]:
    steps = [("specialist", "initial"), ("challenger", "critique"), ("specialist", "reconsider"),
             ("recruiter", "recruit_check"), ("moderator", "final")]
    ev = [TranscriptEvent(kind="call", role=r, agent=r, step=s, usage=Usage(prompt_tokens=900, completion_tokens=150),
                          model="gpt-4o-mini", cache_hit=i % 7 == 0) for i, (r, s) in enumerate(steps * 6)]
    return {c: ev * n for c in CONDITIONS}


def run(n: int, n_boot: int, repeats: int) -> dict[str, float]:
    times: dict[str, float] = {}

    def clock(name: str, f: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        out = f()
        times[name] = time.perf_counter() - t
        return out

    rows = scripted_rows(n, repeats)
    data = clock("rows -> correctness", lambda: correctness_from_rows(rows))
    grid = find_grids(FLAGS)[0]
    clock("factorial, bootstrap + exact tests", lambda: factorial_2x2(data, grid, n_boot=n_boot, models=False))
    clock("factorial, all (with GEE + clogit)", lambda: factorial_2x2(data, grid, n_boot=n_boot))
    clock("4 paired comparisons + Holm", lambda: pair_family(data, PAIRS, n_boot=n_boot))
    clock("Table 3 contrast (2 pairs)", lambda: channel_addition(data, "c1r0", ("c1r1", "c0r1"), n_boot=n_boot))
    if repeats > 1:
        clock("repeats table (4 conditions, both CIs)", lambda: repeat_summary(data, CONDITIONS, n_boot=n_boot))
    clock("2x2 plan from the run as pilot", lambda: plan_2x2(grid.cells, n, 3.0, pilot=align(data, CONDITIONS)))
    events = _events(n)
    clock(f"ledger, {sum(map(len, events.values())):,} events", lambda: condition_totals(ledger(events, {})))
    return times


def print_plan(n: int, effect: float, accuracy: float, rho: float, calls: dict[str, float], tokens_in: float,
               tokens_out: float, latency_s: float, workers: int) -> None:
    """The planner's figures for the 2x2 under stated assumptions (what `medpanel plan` will print)."""
    rate = 2 * accuracy * (1 - accuracy) * (1 - rho)
    print(f"plan: 2x2 on {n} questions, effect {effect:g} points, power 0.8, alpha 0.05 (Holm: 3 factorial "
          f"effects, 4 simple effects); accuracy {100 * accuracy:.0f}%, phi {rho:g} -> p_d = 2 p (1 - p) (1 - phi) = "
          f"{rate:.3f}")
    print(f"  {'comparison':26s} {'kind':8s} {'rate':>6s} {'alpha':>7s} {'n needed':>9s} {'power@n':>8s} "
          f"{'resolves':>8s}")
    for r in plan_2x2(dict(find_grids(FLAGS)[0].cells), n, effect, discordance_rate=rate):
        need = f"{r.n_needed:,}" if r.n_needed < 2**60 else "never"
        print(f"  {r.comparison:26s} {r.kind:8s} {r.rate:6.3f} {r.alpha:7.4f} {need:>9s} {r.power_at_n:8.3f} "
              f"{r.detectable_pts:7.1f}pt" + (f"  ! {r.warning}" if r.warning else ""))
    price = {"gpt-4o-mini": Price(input=0.15, output=0.60)}
    profiles = [CostProfile(c, "gpt-4o-mini", calls[c], calls[c] * tokens_in, calls[c] * tokens_out) for c in calls]
    for row in cost_projection(profiles, n, price):
        print(f"  cost {row['condition']:6s} {row['sent_calls']:10,.0f} calls sent {row['tokens'] / 1e6:8.1f} M tokens "
              f"${row['usd']:8.2f}")
    wall = wall_time_s(profiles, n, latency_s=latency_s, workers=workers)
    print(f"  wall time at {workers} workers, {latency_s:g} s a call: {wall / 3600:.1f} h")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=862)
    ap.add_argument("--boot", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--plan", action="store_true", help="print the 2x2 plan under the assumptions of docs/reports.md")
    args = ap.parse_args()
    if args.plan:
        # Calls per question: bench_cache's scripted 2x2 without the cache (an upper bound).
        calls = {"c0r0": 19.85, "c0r1": 48.5, "c1r0": 27.85, "c1r1": 56.65}
        for acc in (0.20, 0.45):
            print_plan(args.questions, 3.0, acc, 0.5, calls, 2000, 250, 2.0, 8)
        return
    for k in args.repeats:
        times = run(args.questions, args.boot, k)
        total = sum(v for name, v in times.items() if name != "factorial, bootstrap + exact tests")
        print(f"{args.questions} questions x {len(CONDITIONS)} conditions x {k} run(s), {args.boot:,} resamples")
        for name, v in times.items():
            print(f"  {name:42s} {v:7.3f} s")
        print(f"  {'total':42s} {total:7.3f} s  ({total / TARGET_S:.2f} of the {TARGET_S:.0f} s target)")


if __name__ == "__main__":
    main()
