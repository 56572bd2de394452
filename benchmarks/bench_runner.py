"""Benchmark: the runner's own cost per (condition, question), and duplicate executions.

    python -m benchmarks.bench_runner [--points 100 3448] [--workers 4] [--latency-ms 0]

A no-op pipeline (or one that sleeps `--latency-ms`) isolates the runner: Optuna's GridSampler
over SQLite, claims, transcript files, result rows. Printed per grid size: wall time, the
one-off start-up (storage, study), the runner's time per point (wall time / points, minus the
ideal model time latency / workers) with and without the start-up, the ratio to the 20 ms
target, and the number of pairs executed more than once (target 0). `--baseline` also runs one
trial per point, the naive layout, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import tempfile
import time
from collections import Counter
from pathlib import Path

from pydantic import Field

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings
from medpanel.agents.pipelines.registry import register
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.types import Question, TranscriptEvent
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan, auto_shard_size
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store

TARGET_MS = 20.0


class SleepSettings(PipelineSettings):
    latency_ms: float = Field(default=0.0, ge=0)


class SleepPipeline(Pipeline[SleepSettings, ConditionPlan]):
    """Answers after a fixed delay with a letter chosen by hash: no model, no AutoGen."""

    settings_model = SleepSettings
    flags = ("c", "r")

    async def __call__(self, question: Question, condition: ConditionPlan, session: QuestionSession,
                       settings: SleepSettings) -> Outcome:
        if settings.latency_ms:
            await asyncio.sleep(settings.latency_ms / 1000)
        h = int(hashlib.sha256(f"{condition.slug}/{question.key}".encode()).hexdigest(), 16)
        letter = question.letters[h % len(question.letters)]
        session.record(TranscriptEvent(kind="decision", role="pipeline", agent="bench", step="final", content=letter))
        return Outcome(answer=(letter,))


register("bench-sleep")(SleepPipeline)


def make_plan(points: int, workers: int, latency_ms: float, shard_size: int | None) -> Plan:
    n_q = max(1, points // 4)
    scenario = Scenario(name="bench", pipeline="bench-sleep", flags={"c": [0, 1], "r": [0, 1]},
                        settings={"latency_ms": latency_ms},
                        model={"backend": "scripted", "cache": "off"}, run={"workers": workers})
    questions = [Question(dataset=f"ds{i % 9}", qid=str(i), text=f"bench question {i}",
                          options={"A": "a", "B": "b", "C": "c", "D": "d"}, gold=("A",)) for i in range(n_q)]
    conditions = scenario.conditions()
    n_pairs = n_q * len(conditions)
    return Plan(scenario=scenario, conditions=conditions, questions=questions, repeats=1,
                shard_size=shard_size or auto_shard_size(n_pairs, workers))


def measure(points: int, workers: int, latency_ms: float, shard_size: int | None) -> dict[str, float]:
    plan = make_plan(points, workers, latency_ms, shard_size)
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner.create(plan, run_dir=Path(tmp) / "run")
        t0 = time.perf_counter()
        status = runner.run(install_signals=False)
        wall = time.perf_counter() - t0
        store = Store(runner.storage_url, runner.run_dir)
        executions = Counter(store.executions())
        rows = len(store.rows())
        store.close()
    n = len(plan.pairs)
    startup = runner.timings.get("startup_s", 0.0)
    ideal = n * latency_ms / 1000 / workers
    return {"points": n, "shard": plan.shard_size, "trials": len(plan.shards()), "wall_s": wall,
            "startup_s": startup, "per_point_ms": (wall - ideal) / n * 1000,
            "marginal_ms": (wall - startup - ideal) / n * 1000, "dupes": sum(c - 1 for c in executions.values()),
            "missing": n - rows, "complete": status["state"] == "complete"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, nargs="+", default=[100, 3448])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--shard-size", type=int, default=None)
    ap.add_argument("--baseline", action="store_true", help="also run one trial per point (shard size 1)")
    args = ap.parse_args()
    print(f"runner benchmark: workers={args.workers} model latency={args.latency_ms} ms, target <= {TARGET_MS} ms "
          "per point, 0 duplicates")
    header = (f"{'layout':<16}{'points':>7}{'shard':>7}{'trials':>7}{'wall_s':>9}{'startup_s':>10}"
              f"{'ms/point':>10}{'excl.start':>11}{'ratio':>7}{'dupes':>7}{'missing':>8}")
    print(header)
    results = []
    for points in args.points:
        layouts = [("sharded", args.shard_size)] + ([("1 trial/point", 1)] if args.baseline else [])
        for name, shard in layouts:
            r = measure(points, args.workers, args.latency_ms, shard)
            results.append((name, r))
            print(f"{name:<16}{r['points']:>7}{r['shard']:>7}{r['trials']:>7}{r['wall_s']:>9.2f}"
                  f"{r['startup_s']:>10.2f}{r['per_point_ms']:>10.2f}{r['marginal_ms']:>11.2f}"
                  f"{r['per_point_ms'] / TARGET_MS:>7.2f}{r['dupes']:>7}{r['missing']:>8}")
    sharded = [r for n, r in results if n == "sharded"]
    if len(sharded) >= 2:
        flat = sharded[-1]["marginal_ms"] / max(sharded[0]["marginal_ms"], 1e-9)
        print(f"flatness (excl. start-up): ms/point at {sharded[-1]['points']} / at {sharded[0]['points']} "
              f"points = {flat:.2f} (1.0 = flat)")


if __name__ == "__main__":
    main()
