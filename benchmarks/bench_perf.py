"""Performance benchmark against a fixed-latency OpenAI-compatible server on 127.0.0.1.

    python -m benchmarks.bench_perf [--latency-ms 200] [--quick] [--sdk] [--embedded]
    python -m benchmarks.bench_perf --width [--design loop|threads]   (benchmarks/bench_width.py)

Every figure goes through the real path: scenario -> Optuna runner -> AutoGen agents -> openai
client -> HTTP -> store. The model is a local server that answers a valid structured reply after
L ms and serves at most `concurrency` requests at once.

- Framework overhead: wall time of one worker over N = 200 questions (one call each, the worst
  case: every question pays its claim and commit) / (calls x L). Target <= 1.05. Also printed:
  the one-off start-up and the milliseconds each call costs on top of L after it.
- Parallel efficiency: W workers (4, 8), 100 questions each, against a server of concurrency W;
  ideal time (calls x L / W) / measured time. Target >= 0.85. A fixed-latency server keeps the
  workers in lockstep, so their CPU work queues for the interpreter lock at the same moments:
  this is the worst case for threads.
- SQLite contention: "database is locked" errors at 8 workers. Target 0.
- Memory: peak RSS of a 4-worker run over 200 questions, sampled as questions finish; the growth
  per 100 finished questions must stay near zero (finished questions are not kept in memory).
A 5-question warm-up run first pays the process's one-off imports.

- `--sdk`: the openai SDK's `create` against `post` (why `PostedChat` exists).
- `--embedded`: questions per minute of the quickstart on the embedded model (slow: minutes).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import optuna

from benchmarks.bench_width import profiled_workers, run_width
from benchmarks.fake_server import served_apart
from medpanel.agents.model.structured import answer_model, strict_response_format
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import count_records
from medpanel.experiments.run.tracking.state import Tally


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s() -> float:
    """This process's CPU time, every thread (the fake server runs in its own process)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _questions(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"realidx": f"q{i}", "question": f"Benchmark question {i}?",
                                        "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "A"})
                            + "\n" for i in range(n)))
    return path


def run_once(n_questions: int, workers: int, latency_ms: float, concurrency: int,
             sample_rss: bool = False, per_worker: int = 1, profile: str | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, served_apart(latency_ms, concurrency=concurrency) as base_url:
        data = _questions(Path(tmp) / "q.jsonl", n_questions)
        scenario = Scenario.model_validate({
            "name": "perf", "pipeline": "generalist", "flags": {"c": [0]},
            "dataset": {"source": "jsonl", "path": str(data)},
            "model": {"backend": "openai", "name": "fake-model", "base_url": base_url, "cache": "off"},
            "run": {"workers": workers, "questions_per_worker": per_worker},
        })
        plan = make_plan(scenario, base_dir=Path(tmp))
        runner = Runner.create(plan, run_dir=Path(tmp) / "run")
        samples: list[tuple[int, float]] = []

        def progress(t: Tally, total: int) -> None:
            if sample_rss and t.done % 25 == 0:
                samples.append((t.done, _rss_mb()))

        t0, cpu0 = time.perf_counter(), _cpu_s()
        if profile:
            with profiled_workers(profile):
                status = runner.run(progress=progress, install_signals=False)
        else:
            status = runner.run(progress=progress, install_signals=False)
        wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        store = Store(runner.storage_url, runner.run_dir)
        rows = store.rows()
        store.close()
        storage = optuna.storages.RDBStorage(runner.storage_url)
        failed = sum(1 for s in optuna.get_all_study_summaries(storage)
                     for t in optuna.load_study(study_name=s.study_name, storage=storage).trials
                     if t.state == optuna.trial.TrialState.FAIL)
    calls = sum(r.calls for r in rows)
    locked = sum(1 for r in rows if r.error and "locked" in r.error) + failed
    if status["state"] != "complete" or len(rows) != n_questions:
        raise SystemExit(f"benchmark run incomplete: {status} ({len(rows)} of {n_questions} rows)")
    return {"wall": wall, "first": runner.timings.get("first_question_s", 0.0), "calls": calls, "rows": len(rows),
            "locked": locked, "samples": samples, "cpu": cpu}


def sdk_costs(n_messages: int, requests: int = 60) -> dict[str, float]:
    """Milliseconds a request through the SDK's `create` and through `post` (as `PostedChat` sends
    it), against the server with no latency: the difference is the SDK's request transform."""
    import asyncio
    import statistics

    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletion

    fmt = strict_response_format(answer_model(["A", "B", "C", "D"]))
    messages = [{"role": "system", "content": "You are a careful physician. " * 20}]
    messages += [{"role": "user", "name": "moderator", "content": "A post in the debate. " * 30}] * (n_messages - 1)
    body = {"model": "fake-model", "messages": messages, "response_format": fmt, "temperature": 0.0, "seed": 1}

    async def measure(base_url: str) -> dict[str, float]:
        sdk = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        create: Any = sdk.chat.completions.create  # the body is built for `post`; `create` takes it as keywords
        ways: dict[str, Callable[[], Awaitable[object]]] = {"create": lambda: create(**body),
                "post": lambda: sdk.post("/chat/completions", body=body, cast_to=ChatCompletion)}
        times: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(3):  # interleaved rounds: the machine's noise hits both alike
            for name, call in ways.items():
                t0 = time.perf_counter()
                for _ in range(requests // 3):
                    await call()
                times[name].append((time.perf_counter() - t0) / (requests // 3) * 1000)
        await sdk.close()
        return {k: statistics.median(v) for k, v in times.items()}

    with served_apart(0.0, concurrency=1) as base_url:
        return asyncio.run(measure(base_url))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--quick", action="store_true", help="smaller runs (noisier figures)")
    ap.add_argument("--embedded", action="store_true", help="also time the quickstart on the embedded model")
    ap.add_argument("--sdk", action="store_true", help="also time the openai SDK's create against post")
    ap.add_argument("--width", action="store_true", help="only the width figures (benchmarks/bench_width.py)")
    ap.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--design", choices=("loop", "threads"), default="loop")
    ap.add_argument("--threads", type=int, default=4, help="--width, design loop: worker threads")
    ap.add_argument("--per-slot", type=int, default=10, help="--width: questions per slot of width")
    ap.add_argument("--profile", default=None, help="--width: cProfile the widest run into this file")
    args = ap.parse_args()
    if args.width:
        run_once(5, 1, 0.0, 1)  # the process's one-off imports
        latency = args.latency_ms if "--latency-ms" in sys.argv else 1000.0
        run_width(run_once, args.widths, args.design, args.threads, latency, args.per_slot, args.profile)
        return
    L = args.latency_ms / 1000
    print(f"fixed-latency server: L = {args.latency_ms:.0f} ms per call")

    # Warm-up: the process's one-off imports (the HTTP stack, Optuna's storage) are not a run's cost.
    run_once(5, 1, 0.0, 1)
    n = 50 if args.quick else 200
    r = run_once(n, 1, args.latency_ms, 1)
    ideal = r["calls"] * L
    over_ms = (r["wall"] - r["first"] - ideal) / r["calls"] * 1000
    print(f"framework overhead, 1 worker, {r['calls']} questions x 1 call: wall {r['wall']:.2f} s / ideal "
          f"{ideal:.2f} s = {r['wall'] / ideal:.3f}; target <= 1.05")
    print(f"  start-up to the first question {r['first']:.2f} s; then {over_ms:.1f} ms a call on top of L "
          f"({(r['wall'] - r['first']) / ideal:.3f} of ideal)")

    per_worker = 25 if args.quick else 100
    for w in (4, 8):
        r = run_once(per_worker * w, w, args.latency_ms, w)
        ideal = r["calls"] * L / w
        print(f"parallel efficiency, {w} workers, server concurrency {w}, {r['calls']} calls: ideal {ideal:.2f} s / "
              f"measured {r['wall']:.2f} s = {ideal / r['wall']:.3f}; target >= 0.85"
              + (f"; 'database is locked': {r['locked']} (target 0)" if w == 8 else ""))
        print(f"  start-up to the first question {r['first']:.2f} s; after it "
              f"{ideal / (r['wall'] - r['first']):.3f}")

    r = run_once(200, 4, min(args.latency_ms, 50.0), 4, sample_rss=True)
    samples = r["samples"]
    peak = max(m for _, m in samples) if samples else float("nan")
    if len(samples) >= 3:
        (d0, m0), (d1, m1) = samples[1], samples[-1]
        growth = (m1 - m0) / max(d1 - d0, 1) * 100
    else:
        growth = float("nan")
    print(f"memory, 4 workers, 200 questions: peak RSS {peak:.0f} MB; growth {growth:+.2f} MB per 100 finished "
          f"questions (samples: {', '.join(f'{d}:{m:.0f}' for d, m in samples)})")

    if args.sdk:
        for n_messages in (2, 20):
            c = sdk_costs(n_messages)
            print(f"openai SDK, {n_messages} messages, no latency: create {c['create']:.2f} ms, "
                  f"post {c['post']:.2f} ms a request (the transform PostedChat skips: "
                  f"{c['create'] - c['post']:.2f} ms)")

    if args.embedded:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "medpanel", "run", "scenarios/quickstart.yaml", "--quiet",
                                   "--run-dir", f"{tmp}/qs"], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            n = count_records(Path(f"{tmp}/qs"))
        print(f"embedded model: quickstart {n} (condition, question) pairs in {wall:.0f} s = "
              f"{60 * n / wall:.1f} per minute (exit {proc.returncode})")


if __name__ == "__main__":
    main()
