"""Width: hundreds of questions in flight in one process (`python -m benchmarks.bench_perf --width`).

    python -m benchmarks.bench_perf --width [--widths 16 32 64 128 256] [--design loop|threads]
                                            [--threads 4] [--latency-ms 1000] [--per-slot 10]

The fake server (`benchmarks/fake_server.py`) runs in its own process with a fixed latency and a
concurrency equal to the width; each run has `per-slot` questions per slot of width, one call
each. Printed per width, each with its figure, target and ratio:

- parallel efficiency: ideal time (calls x L / width) / measured wall time (start-up included);
  targets >= 0.90 at 128 and >= 0.85 at 256;
- framework CPU per call: this process's CPU time (every thread, from `getrusage`) over the run,
  divided by the calls; target <= 2 ms. CPU time, not wall time: the machine is shared, and
  another process's load does not add to it;
- peak RSS against finished questions (the widest run): growth per 100 finished questions, near 0;
- "database is locked" errors, over every run: target 0.

Two designs of width: `loop` (default) runs `--threads` worker threads, each keeping width/threads
questions in flight on its own event loop (`run.questions_per_worker`); `threads` runs one worker
thread per question in flight (`run.workers` = width).
"""

from __future__ import annotations

import contextlib
import cProfile
import math
import os
import pstats
import threading
import time
from collections.abc import Iterator
from typing import Any

from medpanel.experiments.run.execution import worker

TARGETS = {128: 0.90, 256: 0.85}
CPU_TARGET_MS = 2.0


@contextlib.contextmanager
def profiled_workers(path: str) -> Iterator[None]:
    """cProfile every worker thread (cProfile sees only the thread that enables it), merged into `path`."""
    original = worker.Worker.work
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    async def work(self: worker.Worker, shard: list[Any]) -> tuple[int, int]:
        prof = cProfile.Profile(time.thread_time)  # CPU time: waiting on the network is not a cost
        with lock:
            profiles.append(prof)
        prof.enable()
        try:
            return await original(self, shard)
        finally:
            prof.disable()

    worker.Worker.work = work  # type: ignore[method-assign]
    try:
        yield
    finally:
        worker.Worker.work = original  # type: ignore[method-assign]
        if profiles:
            stats = pstats.Stats(profiles[0])
            for prof in profiles[1:]:
                stats.add(prof)
            stats.dump_stats(path)


def layout(width: int, design: str, threads: int) -> tuple[int, int]:
    """(workers, questions per worker) for a width."""
    if design == "threads":
        return width, 1
    workers = min(threads, width)
    return workers, math.ceil(width / workers)


def ratio_line(name: str, figure: float, target: float, *, higher: bool, unit: str = "") -> str:
    ok = figure >= target if higher else figure <= target
    ratio = figure / target if target else float("nan")
    sign = ">=" if higher else "<="
    return (f"{name}: {figure:.3f}{unit}; target {sign} {target:g}{unit}; ratio {ratio:.2f} "
            f"({'met' if ok else 'MISSED'})")


def run_width(run_once: Any, widths: list[int], design: str, threads: int, latency_ms: float,
              per_slot: int, profile: str | None = None) -> dict[int, dict[str, Any]]:
    L = latency_ms / 1000
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"width: design {design!r}, fake server L = {latency_ms:.0f} ms, concurrency = width, "
          f"{per_slot} questions per slot, 1 call each; {os.cpu_count()} cores, load average {load} "
          "(wall-time figures need idle cores: CPU per call does not)")
    locked = 0
    results: dict[int, dict[str, Any]] = {}
    for i, width in enumerate(widths):
        workers, per_worker = layout(width, design, threads)
        widest = i == len(widths) - 1
        r = run_once(per_slot * width, workers, latency_ms, width, sample_rss=widest, per_worker=per_worker,
                     profile=profile if widest else None)
        results[width] = r
        locked += r["locked"]
        ideal = r["calls"] * L / width
        eff = ideal / r["wall"]
        cpu_ms = r["cpu"] / max(r["calls"], 1) * 1000
        target = TARGETS.get(width)
        head = f"{width:>4} in flight ({workers} workers x {per_worker}), {r['calls']} calls"
        if target is not None:
            print(ratio_line(f"{head}: parallel efficiency", eff, target, higher=True))
        else:
            print(f"{head}: parallel efficiency {eff:.3f} (ideal {ideal:.2f} s / measured {r['wall']:.2f} s)")
        print(f"     start-up to the first question {r['first']:.2f} s; after it "
              f"{ideal / max(r['wall'] - r['first'], 1e-9):.3f}")
        print("     " + ratio_line("framework CPU per call", cpu_ms, CPU_TARGET_MS, higher=False, unit=" ms"))
    r = results[widths[-1]]
    samples = r["samples"]
    if len(samples) >= 3:
        (d0, m0), (d1, m1) = samples[1], samples[-1]
        growth = (m1 - m0) / max(d1 - d0, 1) * 100
        peak = max(m for _, m in samples)
        shown = ", ".join(f"{d}:{m:.0f}" for d, m in samples[:: max(1, len(samples) // 8)])
        print(f"peak RSS at {widths[-1]} in flight: {peak:.0f} MB; growth {growth:+.2f} MB per 100 finished "
              f"questions (target ~0; samples {shown})")
    print(f"'database is locked' errors over every width: {locked} (target 0; "
          f"{'met' if locked == 0 else 'MISSED'})")
    return results
