"""Every core of one machine: `run.processes` against a fixed-latency server, through the real CLI.

    python -m benchmarks.bench_processes [--questions 3000] [--per-slot 25] [--quick]

Each figure is a whole `medpanel run` in a subprocess (scenario -> runner and its child processes
-> agents -> HTTP -> SQLite store) against `benchmarks/fake_server.py` in its own process (one
thread per connection, no concurrency bound, so it serves every request in flight at once). One
call per question (the generalist without its Challenger), `model.cache: off`.

- Throughput: 1 and 2 processes at L = 50 ms, 128 questions in flight per process (4 workers x
  32), the same questions; calls per second from the first question's start to the last one's
  commit (both read from the study), and the ratio 2 : 1. Target >= 1.6 on a 2-core machine.
  Also printed: the rate once every process works (a child joins after its interpreter's start).
  Any error row (a "database is locked" included) stops the benchmark.
- Efficiency at L = 1 s: 128 and 256 in flight in all (2 processes), `--per-slot` questions per
  slot of width; ideal time (calls x L / width) over the whole CLI run's wall time, start-up
  included (the bar), and after the start-up. Targets >= 0.95 at 128, >= 0.90 at 256.

The machine's load average is printed beside each figure: wall-time figures need idle cores.
Each run also prints the CPU per call of the `medpanel run` process tree (start-up included) and of
the fake server, with the rate the machine's cores allow at that CPU (the physical bound of the
2 : 1 target where the server shares the cores), and a timeline per process (seconds after the
CLI started: exec, imports, study, first claim and commit in a thread, its own work done, its
session's end, the runner's children gone, exit; `benchmarks/timeline`) with its wall time in the
store's claims and commits made in a thread (the process's other writers and SQLite's write lock
included).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_width import ratio_line
from benchmarks.fake_server import served_apart, server_stats

WORKERS = 4
EFFICIENCY_TARGETS = {128: 0.95, 256: 0.90}
RATIO_TARGET = 1.6


def load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def _questions(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"realidx": f"q{i}", "question": f"Benchmark question {i}?",
                                        "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "A"})
                            + "\n" for i in range(n)))
    return path


PYCACHE: dict[str, str] = {}
"""`--pycache DIR`: the runs' environment for a bytecode cache (see `bytecode_line`)."""
TIMELINE_SITE = Path(__file__).with_name("timeline")
"""Its `sitecustomize` records each process's start-up stages (see benchmarks/timeline)."""


def cli_run(base_url: str, n_questions: int, processes: int, per_process: int) -> dict[str, Any]:
    """One whole `medpanel run` of `n_questions` with `per_process` questions in flight in each process."""
    with tempfile.TemporaryDirectory() as tmp:
        data = _questions(Path(tmp) / "q.jsonl", n_questions)
        scenario = {"name": "procs", "pipeline": "generalist", "flags": {"c": [0]},
                    "dataset": {"source": "jsonl", "path": str(data)},
                    "model": {"backend": "openai", "name": "fake-model", "base_url": base_url, "cache": "off"},
                    "run": {"workers": WORKERS, "questions_per_worker": max(1, per_process // WORKERS),
                            "processes": processes, "max_errors": None}}
        path = Path(tmp) / "s.yaml"
        path.write_text(json.dumps(scenario))  # JSON is YAML
        run_dir = Path(tmp) / "run"
        timeline = Path(tmp) / "timeline"
        timeline.mkdir()
        env = {**os.environ, **PYCACHE, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "sk-bench"),
               "MEDPANEL_TIMELINE_DIR": str(timeline),
               "PYTHONPATH": os.pathsep.join(p for p in (str(TIMELINE_SITE), os.environ.get("PYTHONPATH")) if p)}
        server0 = server_stats(base_url)
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0_epoch, t0 = time.time(), time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(path), "--run-dir", str(run_dir),
                               "--quiet"], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        server1 = server_stats(base_url)
        if proc.returncode != 0:
            raise SystemExit(f"benchmark run failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
                             f"{proc.stderr[-2000:]}")
        with contextlib.closing(sqlite3.connect(run_dir / "study.db")) as conn:
            calls, rows, errors, last, workers = conn.execute(
                "select sum(calls), count(*), count(error), max(finished_at), count(distinct worker) "
                "from mp_results").fetchone()
            first, executions = conn.execute("select min(started_at), count(*) from mp_executions").fetchone()
            # Once every process works: from the last process's first question on.
            (joined,) = conn.execute("select max(s) from (select min(started_at) as s from mp_executions "
                                     "group by owner)").fetchone()
            (after,) = conn.execute("select sum(calls) from mp_results where finished_at >= ?", (joined,)).fetchone()
        stages = read_timeline(timeline, t0_epoch)
    if rows != n_questions or errors:
        raise SystemExit(f"benchmark run incomplete: {rows} of {n_questions} rows, {errors} errors")
    # CPU of the whole `medpanel run` tree (the runner waits for its children, so theirs is in it).
    runner_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"wall": wall, "calls": int(calls), "steady_s": float(last - first), "processes_seen": int(workers),
            "executions": int(executions), "all_rate": float(after or 0) / max(float(last - joined), 1e-9),
            "join_s": float(joined - first), "first_s": float(first - t0_epoch), "tail_s": wall - (last - t0_epoch),
            "runner_cpu_s": runner_cpu, "server_cpu_s": server1["cpu_s"] - server0["cpu_s"], "stages": stages}


SHOWN = (("exec", "exec"), ("import medpanel.experiments.run.execution.runner end", "imports"),
         ("Runner.create end", "created"), ("Runner.open end", "opened"), ("Runner.run start", "run"),
         ("Group.spawn start", "spawn"),
         ("Runner._prior end", "prior"), ("Runner.prepare end", "prepared"), ("preload end", "preloaded"),
         ("new_study end", "study"), ("Group.send end", "sent"), ("Store.claim start", "1st claim"),
         ("Store.commit end", "1st commit"), ("stay_until_done start", "own work done"),
         ("Runner.run end", "session end"), ("Group.wait start", "work done"), ("Group.wait end", "children gone"),
         ("print_summary start", "summary"), ("exit", "exit"))


def read_timeline(folder: Path, t0: float) -> list[dict[str, Any]]:
    """Each process's stages, seconds after the benchmark started the CLI (the runner first)."""
    procs: dict[int, dict[str, Any]] = {}
    for f in folder.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            p = procs.setdefault(e["pid"], {"pid": e["pid"], "ppid": e["ppid"], "at": {}, "timed": {}})
            if e["event"] == "totals":
                p["timed"] = e["timed"]
            p["at"].setdefault(e["event"], e["t"] - t0)
    for p in procs.values():
        p["child"] = p["ppid"] in procs  # started by the runner
    return sorted(procs.values(), key=lambda p: (p["child"], p["at"].get("exec", 0.0)))


def print_timeline(stages: list[dict[str, Any]]) -> None:
    for p in stages:
        at = p["at"]
        marks = "  ".join(f"{label} {at[key]:.2f}" for key, label in SHOWN if key in at)
        print(f"     {'child ' if p['child'] else 'runner'} {p['pid']}: {marks}")
        timed = "; ".join(f"{name.split('.')[-1]} {n:.0f} x {s / max(n, 1) * 1000:.1f} ms (longest {top * 1000:.0f} ms)"
                          for name, (n, s, top) in sorted(p["timed"].items()))
        if timed:
            print(f"       in the store (wall, in its thread): {timed}")


def bytecode_line() -> str:
    """Whether the runs' imports read cached bytecode: with PYTHONDONTWRITEBYTECODE set and none
    installed (uv installs none unless asked), every process compiles every module it imports from
    source, about half its start-up here; a pip install, or any environment that may write
    __pycache__, has it."""
    import openai  # a package the run imports: is its bytecode there?

    if PYCACHE:
        return f"bytecode: cached under {PYCACHE['PYTHONPYCACHEPREFIX']} (--pycache)"
    installed = (Path(openai.__file__).parent / "__pycache__").is_dir()
    if installed or not sys.dont_write_bytecode:
        return "bytecode: cached"
    return ("bytecode: NONE (PYTHONDONTWRITEBYTECODE is set and site-packages has no __pycache__): each "
            "process compiles its imports from source; --pycache DIR measures what an install with bytecode gets")


def cpu_line(r: dict[str, Any]) -> str:
    """CPU per call of the medpanel processes and of the server, and the rate two cores allow at that."""
    runner_ms, server_ms = r["runner_cpu_s"] / r["calls"] * 1000, r["server_cpu_s"] / r["calls"] * 1000
    cores = os.cpu_count() or 1
    return (f"CPU per call: medpanel {runner_ms:.2f} ms + fake server {server_ms:.2f} ms; {cores} cores allow at most "
            f"{cores * 1000 / (runner_ms + server_ms):.0f} calls/s at that CPU")


def throughput(n_questions: int, per_process: int, *, aio: bool = True) -> None:
    print(f"throughput: L = 50 ms, {per_process} in flight per process ({WORKERS} workers x "
          f"{per_process // WORKERS}), {n_questions} questions x 1 call")
    rates: dict[int, float] = {}
    with served_apart(50.0, aio=aio) as url:
        cli_run(url, 20, 1, 4)  # warm-up: the first start of the interpreter and its imports
        for p in (1, 2):
            before = load()
            r = cli_run(url, n_questions, p, per_process)
            rates[p] = r["calls"] / r["steady_s"]
            print(f"  {p} process{'es' if p > 1 else ''}: {rates[p]:.0f} calls/s ({r['calls']} calls in "
                  f"{r['steady_s']:.1f} s after start-up; whole CLI {r['wall']:.1f} s; committed by "
                  f"{r['processes_seen']} processes; {r['executions']} executions, 0 errors) [{before} -> {load()}]")
            if p > 1:
                print(f"     once all {p} work ({r['join_s']:.1f} s after the first question): "
                      f"{r['all_rate']:.0f} calls/s")
            print(f"     {cpu_line(r)}")
            print_timeline(r["stages"])
    print("  " + ratio_line("2 processes : 1", rates[2] / rates[1], RATIO_TARGET, higher=True))


def efficiency(widths: list[int], per_slot: int, processes: int, *, aio: bool = True) -> None:
    print(f"efficiency: L = 1 s, {processes} processes, {per_slot} questions per slot, whole CLI runs")
    with served_apart(1000.0, aio=aio) as url:
        if PYCACHE:
            cli_run(url, 20, processes, 4 * processes)  # warm-up: fills the bytecode cache
        for width in widths:
            before = load()
            r = cli_run(url, per_slot * width, processes, width // processes)
            ideal = r["calls"] * 1.0 / width
            eff = ideal / r["wall"]
            line = f"  {width} in flight ({processes} x {WORKERS} workers x {width // processes // WORKERS})"
            target = EFFICIENCY_TARGETS.get(width)
            print(ratio_line(f"{line}: whole-CLI efficiency", eff, target, higher=True) if target else
                  f"{line}: whole-CLI efficiency {eff:.3f}")
            print(f"     ideal {ideal:.1f} s / wall {r['wall']:.1f} s = first question {r['first_s']:.1f} s + "
                  f"work {r['steady_s']:.1f} s + end {r['tail_s']:.1f} s; after start-up "
                  f"{ideal / r['steady_s']:.3f} [{before} -> {load()}]")
            print(f"     {cpu_line(r)}")
            print_timeline(r["stages"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=3000, help="throughput: questions per run")
    ap.add_argument("--per-process", type=int, default=128, help="throughput: questions in flight per process")
    ap.add_argument("--per-slot", type=int, default=25, help="efficiency: questions per slot of width")
    ap.add_argument("--widths", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--processes", type=int, default=2, help="efficiency: processes")
    ap.add_argument("--threaded-server", action="store_true",
                    help="the fake server's thread-per-connection mode instead of its event loop")
    ap.add_argument("--quick", action="store_true", help="1,000 questions and 5 per slot (noisier)")
    ap.add_argument("--only", choices=("throughput", "efficiency"), default=None)
    ap.add_argument("--pycache", type=Path, default=None,
                    help="let the runs write and read bytecode under DIR (PYTHONPYCACHEPREFIX), as an install with "
                         "bytecode would; the warm-up run fills it")
    args = ap.parse_args()
    if args.pycache is not None:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the runs inherit it
        PYCACHE["PYTHONPYCACHEPREFIX"] = str(args.pycache.resolve())
    if args.quick:
        args.questions, args.per_slot = 1000, 5
    # The fake server on one event loop by default: its thread-per-connection mode spends a core's
    # share of CPU the second process needs.
    aio = not args.threaded_server
    print(f"{os.cpu_count()} cores; {load()}; fake server: {'event loop' if aio else 'a thread per connection'}; "
          f"{bytecode_line()}")
    if args.only != "efficiency":
        throughput(args.questions, args.per_process, aio=aio)
    if args.only != "throughput":
        efficiency(args.widths, args.per_slot, args.processes, aio=aio)


if __name__ == "__main__":
    main()
