"""Scale of the grid: the full 2x2 on 862 questions, 1 and 10 repeats (3,448 and 34,480 pairs).

    python -m benchmarks.bench_grid [--repeats 1 10] [--questions 862] [--workers 4] [--per-worker 4]

A no-op pipeline (`benchmarks.bench_runner`'s, answering at once with a hashed letter) isolates
the runner: Optuna's study over SQLite, claims, transcript files, result rows. The questions are
synthetic, the count and shape of the 862 hard questions (the runner never reads their text).
Printed per grid, each with figure, target and ratio: the runner's cost per pair (wall / pairs)
against 5 ms; its flatness (cost per pair at the largest grid / at the smallest, target ~1); the
study file's size; and `resume` (open the run, find nothing left) time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_runner import SleepPipeline  # noqa: F401  (registers the no-op pipeline)
from medpanel.agents.types import Question
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan, auto_shard_size
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store

TARGET_MS = 5.0


def grid_plan(n_questions: int, repeats: int, workers: int, per_worker: int) -> Plan:
    scenario = Scenario(name="grid", pipeline="bench-sleep", flags={"c": [0, 1], "r": [0, 1]},
                        model={"backend": "scripted", "cache": "off"},
                        run={"workers": workers, "questions_per_worker": per_worker, "repeats": repeats,
                             "max_errors": None})
    questions = [Question(dataset="hard", qid=f"h{i:04d}", text=f"grid question {i}",
                          options={"A": "a", "B": "b", "C": "c", "D": "d"}, gold=("A",)) for i in range(n_questions)]
    conditions = scenario.conditions()
    n_pairs = len(conditions) * n_questions * repeats
    return Plan(scenario=scenario, conditions=conditions, questions=questions, repeats=repeats,
                shard_size=auto_shard_size(n_pairs, workers))


def measure(n_questions: int, repeats: int, workers: int, per_worker: int) -> dict[str, Any]:
    plan = grid_plan(n_questions, repeats, workers, per_worker)
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner.create(plan, run_dir=Path(tmp) / "run")
        t0 = time.perf_counter()
        status = runner.run(install_signals=False)
        wall = time.perf_counter() - t0
        store = Store(runner.storage_url, runner.run_dir)
        rows = len(store.rows())
        store.close()
        db = Path(tmp) / "run" / "study.db"
        size = sum(p.stat().st_size for p in db.parent.glob("study.db*"))
        t0 = time.perf_counter()
        again = Runner.open(runner.run_dir).run(install_signals=False)
        resume = time.perf_counter() - t0
    n = len(plan.pairs)
    return {"pairs": n, "wall": wall, "ms": wall / n * 1000, "rows": rows, "complete": status["state"] == "complete",
            "size_mb": size / 1e6, "resume_s": resume, "resumed": again["state"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--questions", type=int, default=862)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--per-worker", type=int, default=4)
    args = ap.parse_args()
    print(f"grid benchmark: 2x2 x {args.questions} questions, no-op model, {args.workers} workers x "
          f"{args.per_worker} in flight; target <= {TARGET_MS:g} ms per pair, flat")
    results = []
    for repeats in args.repeats:
        r = measure(args.questions, repeats, args.workers, args.per_worker)
        results.append(r)
        ok = r["ms"] <= TARGET_MS
        print(f"{r['pairs']:>6} pairs ({repeats} repeats): wall {r['wall']:.1f} s; runner cost per pair "
              f"{r['ms']:.2f} ms; target <= {TARGET_MS:g} ms; ratio {r['ms'] / TARGET_MS:.2f} "
              f"({'met' if ok else 'MISSED'}); rows {r['rows']}/{r['pairs']}; study file {r['size_mb']:.1f} MB; "
              f"resume (nothing left) {r['resume_s']:.2f} s -> {r['resumed']}")
    if len(results) >= 2:
        flat = results[-1]["ms"] / results[0]["ms"]
        print(f"flatness: ms per pair at {results[-1]['pairs']} / at {results[0]['pairs']} = {flat:.2f}; "
              f"target ~1 (<= 1.2: {'met' if flat <= 1.2 else 'MISSED'})")


if __name__ == "__main__":
    main()
