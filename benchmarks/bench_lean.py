"""Side by side with inspect_ai: the same questions, messages, schema and endpoint, CPU per call.

    python -m benchmarks.bench_lean [--latency-ms 500 1000] [--questions 3000] [--in-flight 64]
                                    [--harness medpanel inspect] [--quick] [--profile FILE]

One fake OpenAI-compatible endpoint (`benchmarks/fake_server.py`) runs in its own process with a
fixed latency per latency figure, so its work is not counted. Each harness then runs in a fresh
child process of its own (its imports and a 5-question warm-up before the measured run are not
counted) and answers the same N synthetic four-option questions, one call each, 64 in flight:

- medpanel: the `direct` single-model baseline through the real path (scenario -> Optuna runner ->
  AutoGen agent -> client -> HTTP -> SQLite store and transcript log), one worker thread whose
  event loop keeps `--in-flight` questions going (`run.questions_per_worker`);
- inspect_ai: a `Task` over a `MemoryDataset` of the same questions, `generate()` through its
  OpenAI-compatible provider (`openai-api/fake/fake-model`, base URL the fake endpoint),
  `max_connections` = `max_samples` = in flight, a trivial scorer, logs to a temporary folder.

Both send the same system prompt, the same user message (medpanel's own `format_question`) and the
same strict JSON schema as `response_format`. Printed per harness: wall time, calls (as the fake
endpoint counted them), efficiency (ideal = calls x latency / in flight, over measured wall), CPU per
model call (the harness process's CPU time, every thread, `getrusage`, over the measured run /
calls) and the machine's load average at the start and end of the run; then the ratio medpanel /
inspect_ai of CPU per call beside the targets (<= 1.5 ms per call, <= 0.07x inspect_ai's, efficiency
>= 0.97), and the best efficiency the number of calls allows at all (each lane's calls follow one
another, so N calls take ceil(N / in flight) latencies: 0.9375 for `--quick`'s 300, 0.997 for
3,000). CPU per call hardly moves with the machine's load; wall time and efficiency do.

`--quick` is 300 questions. `--profile FILE` cProfiles medpanel's worker thread (CPU time) into FILE.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.bench_width import profiled_workers
from benchmarks.fake_server import served_apart
from medpanel.agents.model.structured import answer_model, strict_response_format
from medpanel.agents.prompting import format_question
from medpanel.agents.roles.baseline import PROMPTS
from medpanel.agents.types import Question
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import count_records

CPU_TARGET_MS = 1.5
RATIO_TARGET = 0.07
EFFICIENCY_TARGET = 0.97
WARMUP = 5
LETTERS = ("A", "B", "C", "D")


def _cpu_s() -> float:
    """This process's CPU time, every thread (the fake endpoint runs in a process of its own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def served(base_url: str) -> int:
    """Chat completions the fake endpoint has answered so far."""
    with urllib.request.urlopen(f"{base_url}/stats", timeout=10) as reply:
        return int(json.loads(reply.read())["requests"])


def question_records(n: int, prefix: str = "q") -> list[dict[str, Any]]:
    """N synthetic four-option questions in the JSONL form medpanel's `jsonl` source reads."""
    return [{"realidx": f"{prefix}{i}", "question": f"Benchmark question {i}: which option is the right one?",
             "options": {k: f"option {k.lower()} of question {i}" for k in LETTERS}, "answer_idx": LETTERS[i % 4]}
            for i in range(n)]


def messages_and_schema(record: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(system prompt, user message, response_format) exactly as medpanel's `direct` baseline sends them."""
    question = Question(dataset="bench", qid=record["realidx"], text=record["question"],
                        options=record["options"], gold=(record["answer_idx"],))
    fmt = strict_response_format(answer_model(list(LETTERS), reasoning=False))
    return PROMPTS.render("direct"), format_question(question), fmt


# --- medpanel -------------------------------------------------------------------------------------

def run_medpanel(base_url: str, records: list[dict[str, Any]], in_flight: int, tmp: Path,
                 profile: str | None = None) -> dict[str, Any]:
    """One `direct` run over `records`; returns its CPU, wall time and what its store holds."""
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / "questions.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    scenario = Scenario.model_validate({
        "name": "lean", "pipeline": "direct",
        "dataset": {"source": "jsonl", "path": str(data)},
        "model": {"backend": "openai", "name": "fake-model", "base_url": base_url, "cache": "off",
                  "temperature": 0.0, "seed": 1, "max_tokens": 64},
        "run": {"workers": 1, "questions_per_worker": min(in_flight, len(records)), "max_errors": 0},
    })
    plan = make_plan(scenario, base_dir=tmp)
    runner = Runner.create(plan, run_dir=tmp / "run")
    t0, cpu0 = time.perf_counter(), _cpu_s()
    if profile:
        with profiled_workers(profile):
            status = runner.run(install_signals=False)
    else:
        status = runner.run(install_signals=False)
    wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    executions = store.executions()
    store.close()
    transcripts = count_records(runner.run_dir)
    return {"wall_s": wall, "cpu_s": cpu, "state": status["state"], "rows": len(rows),
            "answered": sorted(r.qid for r in rows if not r.error and not r.invalid),
            "executions": len(executions), "distinct_executions": len(set(executions)),
            "harness_calls": sum(r.calls for r in rows), "transcripts": transcripts}


# --- inspect_ai -----------------------------------------------------------------------------------

def run_inspect(base_url: str, records: list[dict[str, Any]], in_flight: int, tmp: Path) -> dict[str, Any]:
    """One inspect_ai eval over `records` with `generate()`; returns its CPU, wall time and log's samples.
    inspect_ai is imported here: it is optional (the `[inspect]` extra)."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig, ResponseSchema
    from inspect_ai.scorer import Score, Target, accuracy, scorer
    from inspect_ai.solver import TaskState, generate
    from inspect_ai.util import JSONSchema

    def letter() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            try:
                answer = json.loads(state.output.completion).get("answer")
            except (ValueError, AttributeError):
                answer = None
            return Score(value="C" if answer == target.text else "I", answer=str(answer))

        return score

    # Applied as a call, not as `@scorer(...)`: where only [dev] is installed inspect_ai is untyped and
    # mypy --strict refuses an untyped decorator (the registered name is still `letter`).
    letter_scorer = scorer(metrics=[accuracy()])(letter)

    samples = []
    fmt: dict[str, Any] = {}
    for r in records:
        system, user, fmt = messages_and_schema(r)
        samples.append(Sample(id=r["realidx"], input=[ChatMessageSystem(content=system), ChatMessageUser(content=user)],
                              target=r["answer_idx"]))
    spec = fmt["json_schema"]
    schema = ResponseSchema(name=spec["name"], json_schema=JSONSchema.model_validate(spec["schema"]), strict=True)
    config = GenerateConfig(temperature=0.0, seed=1, max_tokens=64, response_schema=schema,
                            max_connections=in_flight, max_retries=3, timeout=120)
    task = Task(dataset=MemoryDataset(samples), solver=generate(), scorer=letter_scorer(), config=config)
    os.environ.setdefault("FAKE_API_KEY", "sk-no-key")
    tmp.mkdir(parents=True, exist_ok=True)
    t0, cpu0 = time.perf_counter(), _cpu_s()
    logs = eval(task, model="openai-api/fake/fake-model", model_base_url=base_url, log_dir=str(tmp / "logs"),
                max_samples=in_flight, max_connections=in_flight, display="none", log_level="error")
    wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
    log = read_eval_log(logs[0].location)
    got = log.samples or []
    answered = sorted(str(s.id) for s in got if s.scores and not s.error
                      and json.loads(s.output.completion or "{}").get("answer") in LETTERS)
    return {"wall_s": wall, "cpu_s": cpu, "state": log.status, "rows": len(got), "answered": answered,
            "harness_calls": len(got)}


# --- the child process that runs one harness ------------------------------------------------------

def child(harness: str, base_url: str, n: int, in_flight: int, profile: str | None) -> dict[str, Any]:
    """Warm up (imports, first connections), then the measured run; the endpoint's count gives the calls."""
    runner = run_medpanel if harness == "medpanel" else run_inspect
    with tempfile.TemporaryDirectory() as tmp:
        runner(base_url, question_records(WARMUP, prefix="w"), WARMUP, Path(tmp) / "warm")
        before, load0 = served(base_url), _load()
        extra = {"profile": profile} if harness == "medpanel" and profile else {}
        r = runner(base_url, question_records(n), in_flight, Path(tmp) / "run", **extra)
        r["calls"] = served(base_url) - before
    r.update(harness=harness, load_start=load0, load_end=_load(), n=n, in_flight=in_flight)
    return r


def run_harness(harness: str, base_url: str, n: int, in_flight: int, profile: str | None = None) -> dict[str, Any]:
    """`child` in a fresh interpreter, so neither harness's imports or threads touch the other's figures."""
    cmd = [sys.executable, "-m", "benchmarks.bench_lean", "--child", harness, "--base-url", base_url,
           "--questions", str(n), "--in-flight", str(in_flight)] + (["--profile", profile] if profile else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{harness} run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def figures(r: dict[str, Any], latency_ms: float) -> dict[str, float]:
    ideal = r["calls"] * latency_ms / 1000 / r["in_flight"]
    return {"efficiency": ideal / r["wall_s"] if r["wall_s"] else float("nan"),
            "cpu_ms": r["cpu_s"] / max(r["calls"], 1) * 1000}


def rounds_bound(calls: int, in_flight: int) -> float:
    """The best efficiency `calls` sequential calls of one fixed latency allow over `in_flight` lanes:
    they take ceil(calls / in_flight) latencies at least (0.9375 for 300 over 64: `--quick` cannot
    reach 0.97; 0.9972 for 3,000)."""
    return calls / (math.ceil(calls / in_flight) * in_flight)


def compare(latencies: list[float], harnesses: list[str], n: int, in_flight: int,
            profile: str | None = None) -> list[tuple[float, dict[str, dict[str, Any]]]]:
    print(f"side by side: {n} questions x 1 call, {in_flight} in flight, fake endpoint in its own process; "
          f"{os.cpu_count()} cores; targets: CPU per call <= {CPU_TARGET_MS:g} ms and <= {RATIO_TARGET:g}x "
          f"inspect_ai's, efficiency >= {EFFICIENCY_TARGET:g}")
    print(f"{'latency':>8} {'harness':<10} {'wall_s':>8} {'calls':>6} {'efficiency':>10} {'CPU/call':>9} "
          f"{'load start -> end':>24}")
    out = []
    for latency in latencies:
        with served_apart(latency, concurrency=in_flight) as base_url:
            results = {h: run_harness(h, base_url, n, in_flight, profile if h == "medpanel" else None)
                       for h in harnesses}
        for h, r in results.items():
            f = figures(r, latency)
            print(f"{latency:>6.0f}ms {h:<10} {r['wall_s']:>8.2f} {r['calls']:>6} {f['efficiency']:>10.3f} "
                  f"{f['cpu_ms']:>7.2f}ms {r['load_start'] + ' -> ' + r['load_end']:>24}")
        if "medpanel" in results:
            mp = figures(results["medpanel"], latency)["cpu_ms"]
            line = f"{'':>8} medpanel CPU per call {mp:.2f} ms (target <= {CPU_TARGET_MS:g} ms: " \
                   f"{'met' if mp <= CPU_TARGET_MS else 'MISSED'})"
            if "inspect" in results:
                ratio = mp / figures(results["inspect"], latency)["cpu_ms"]
                line += f"; medpanel / inspect_ai = {ratio:.3f}x (target <= {RATIO_TARGET:g}x: " \
                        f"{'met' if ratio <= RATIO_TARGET else 'MISSED'})"
            eff = figures(results["medpanel"], latency)["efficiency"]
            line += f"; efficiency {eff:.3f} (target >= {EFFICIENCY_TARGET:g}: " \
                    f"{'met' if eff >= EFFICIENCY_TARGET else 'MISSED'}; at most {rounds_bound(n, in_flight):.3f} " \
                    "with these calls)"
            print(line)
        out.append((latency, results))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency-ms", type=float, nargs="+", default=[500.0, 1000.0])
    ap.add_argument("--questions", type=int, default=3000)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--harness", nargs="+", choices=("medpanel", "inspect"), default=["medpanel", "inspect"])
    ap.add_argument("--quick", action="store_true", help="300 questions (noisier figures)")
    ap.add_argument("--profile", default=None, help="cProfile medpanel's worker thread into this file")
    ap.add_argument("--child", choices=("medpanel", "inspect"), help=argparse.SUPPRESS)
    ap.add_argument("--base-url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.base_url, args.questions, args.in_flight, args.profile)))
        return
    n = 300 if args.quick and "--questions" not in sys.argv else args.questions
    compare(args.latency_ms, args.harness, n, args.in_flight, args.profile)


if __name__ == "__main__":
    main()
