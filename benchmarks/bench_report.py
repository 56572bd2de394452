"""Benchmark: `medpanel report` and `medpanel report --html` on a scripted run: wall and CPU
seconds and peak memory (each in a fresh process, so the peak is its own), with the load average.

    python -m benchmarks.bench_report [--run-dir DIR] [--keep DIR] [--subsets medqa,pubmedqa]
                                      [--rounds 3 --turns 3] [--data ../shared/data/medagentsbench]

Without `--run-dir` it first runs the c x r panel 2x2 with the scripted model on the hard set
(every subset's test_hard.jsonl, 862 questions x 4 conditions unless `--subsets` names fewer) at
`--rounds` x `--turns` (the papers' protocol is 3 x 3) into `--keep` or a temporary folder.
The floor is one decoding of every transcript (its bytes read and parsed as JSON, nothing
else) in one process, a fresh one like the others; each figure is also printed as a multiple of it
(CPU over the floor's CPU, which the load average moves less than wall time). `report` reads the
transcripts in several processes (`experiments/analysis/fanout.py`; the count it chooses here is
printed): a figure's CPU is the command's process and its workers' together (`RUSAGE_CHILDREN` once
they are waited for), and its peak memory is the most the process and its workers held at once, the
sum of their proportional set sizes (`Pss` of /proc/PID/smaps_rollup: a page the forked workers
share with the parent counted once, split between them), read every 10 ms from this process; the
parent's own peak RSS and the largest worker's are printed beside it. The whole process is
`python -m medpanel report RUN_DIR` from exec to exit, imports included. `--breakdown` also prints
where one `report`'s CPU goes, in a fresh process and in one process (each part timed alone): the
CLI's imports, the store's rows, the transcripts read into digests (beside the floor's decoding),
the statistics' and model fits' imports (SciPy and statsmodels, on first use), the tables, and
printing and writing them.
Targets, for the 862 x 4 run at 3 x 3: `report` <= 2x the floor and <= 300 MB, `report --html` <= 6x
the floor, the whole `medpanel report` process <= 4 s. To compare two checkouts, run each one's
interpreter on the same `--run-dir`, back to back, and read the load printed beside each figure.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import medpanel
from medpanel.experiments.analysis.fanout import process_count
from medpanel.experiments.cli.inspect import report
from medpanel.experiments.run.store.rundir import load_run

SUBSETS = ["medqa", "pubmedqa", "medmcqa", "medbullets", "medexqa", "medxpertqa-r", "medxpertqa-u", "mmlu",
           "mmlu-pro"]
SCENARIO = {
    "name": "bench-report-2x2", "pipeline": "panel", "flags": {"c": [0, 1], "r": [0, 1]},
    "settings": {"rounds": 1, "turns_per_round": 2},
    "compare": [["c0r0", "c1r0"], ["c1r0", "c1r1"], ["c0r0", "c0r1"], ["c0r1", "c1r1"]],
    "model": {"backend": "scripted"},
    "run": {"workers": 2, "prices": {"scripted": {"input": 0.15, "output": 0.6}}},
}
TARGETS = {"report": "<= 2x the floor, <= 300 MB", "html": "<= 6x the floor", "process": "<= 4 s"}


def make_run(data: Path, root: Path, subsets: list[str], rounds: int, turns: int) -> Path:
    sc = {**SCENARIO, "settings": {"rounds": rounds, "turns_per_round": turns},
          "dataset": {"source": "medagentsbench", "path": str(data.resolve()), "subsets": subsets}}
    return Path(medpanel.run(sc, run_dir=root / "run").run_dir)


def floor(run_dir: Path) -> None:
    """Every row's transcript read and decoded once, nothing kept; prints `wall cpu peak_mb`."""
    import pydantic_core

    from medpanel.experiments.run.store.rundir import transcript_paths

    rows = load_run(run_dir).rows
    path_of = transcript_paths(run_dir)
    w, c = time.perf_counter(), time.process_time()
    for row in rows:
        path = path_of(row)
        if path.is_file():
            pydantic_core.from_json(path.read_bytes())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{time.perf_counter() - w:.2f} {time.process_time() - c:.2f} {peak:.0f}")


def whole_process(run_dir: Path) -> tuple[float, float]:
    """Wall and CPU seconds of `python -m medpanel report RUN_DIR`, exec to exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w = time.perf_counter()
    subprocess.run([sys.executable, "-m", "medpanel", "report", str(run_dir)], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return time.perf_counter() - w, cpu


def import_first_use() -> None:
    """What the tables' bootstrap and exact tests (SciPy) and model fits (statsmodels) import when
    they first run."""
    with contextlib.suppress(ImportError):
        import scipy.stats  # noqa: F401
        import statsmodels.discrete.conditional_models
        import statsmodels.genmod.generalized_estimating_equations  # noqa: F401


def phase(run_dir: Path, html: bool) -> None:
    """One `medpanel report [--html]` in this process and its workers; prints `wall cpu self_peak_mb
    worker_peak_mb` on the last line (cpu: this process's and its workers').
    What the command imports is imported first (the commands import their analysis when they run,
    and the statistics import SciPy and statsmodels when a test or a fit runs), so the figure is the
    work; the whole process's figure has the imports."""
    import medpanel.experiments.analysis.report
    import medpanel.experiments.cli.output
    import medpanel.experiments.view.viewer  # noqa: F401

    import_first_use()

    w, c, kids = time.perf_counter(), time.process_time(), _children_cpu()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        report(run_dir, html=html)
    cpu = time.process_time() - c + _children_cpu() - kids  # the workers are waited for before report returns
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"{time.perf_counter() - w:.2f} {cpu:.2f} {peak:.0f} {workers:.0f}")


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, as /proc lists them now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return out


def _pss_mb(pid: int) -> float:
    total = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
    return total / 1024


def breakdown(run_dir: Path) -> None:
    """Where one `report`'s CPU goes, each part timed alone in this fresh process, in the order the
    command does them; prints one `part cpu_s` line per part."""
    def cpu() -> float:
        return time.process_time()

    parts: list[tuple[str, float]] = []
    c = cpu()
    import medpanel.experiments.cli.inspect  # noqa: F401  what `medpanel report` imports before it reads
    from medpanel.experiments.analysis.digest import gc_frozen, gc_paused, read_digests
    from medpanel.experiments.analysis.report import build_tables, write_report
    from medpanel.experiments.cli.output import print_header, print_table, read_run
    parts.append(("imports (CLI, analysis)", cpu() - c))
    c = cpu()
    record, rows = read_run(run_dir)
    parts.append(("store: run.json and rows", cpu() - c))
    c = cpu()
    with gc_paused():
        digests = list(read_digests(run_dir, rows, scoring=record.scoring))
    parts.append(("transcripts read into digests", cpu() - c))
    with gc_frozen():  # as `read_run_tables` builds them
        c = cpu()
        import_first_use()  # timed apart from the tables
        parts.append(("imports on first use (scipy, statsmodels)", cpu() - c))
        c = cpu()
        tables = build_tables(rows, record, digests=digests)
        parts.append(("tables", cpu() - c))
    c = cpu()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        print_header(record, rows)
        for t in tables:
            print_table(t, where="report/")
        write_report(run_dir, tables)
    parts.append(("printed and written", cpu() - c))
    for name, s in parts:
        print(f"{s:.2f} {name}")


def measure(run_dir: Path, name: str) -> tuple[float, float, float, float, float]:
    """A phase in a fresh process: wall, cpu, the tree's peak PSS (sampled here), the process's own
    peak RSS and its largest worker's (0 for the floor, which has none)."""
    cmd = [sys.executable, "-m", "benchmarks.bench_report", "--phase", name, str(run_dir)]
    with tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.DEVNULL, text=True)
        tree = 0.0
        while proc.poll() is None:
            tree = max(tree, _pss_mb(proc.pid))
            time.sleep(0.01)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
        stdout.seek(0)
        out = stdout.read().split()
    if name == "floor":
        wall, cpu, peak = (float(x) for x in out[-3:])
        return wall, cpu, tree, peak, 0.0
    wall, cpu, peak, worker = (float(x) for x in out[-4:])
    return wall, cpu, tree, peak, worker


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--keep", type=Path, help="Make the run here (kept) instead of a temporary folder.")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/medagentsbench"))
    ap.add_argument("--subsets", default=",".join(SUBSETS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true", help="Also print where one `report`'s CPU goes.")
    ap.add_argument("--phase", choices=["floor", "report", "html", "breakdown"], help=argparse.SUPPRESS)
    ap.add_argument("phase_run", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase == "floor":
        floor(args.phase_run)
        return
    if args.phase == "breakdown":
        breakdown(args.phase_run)
        return
    if args.phase:
        phase(args.phase_run, args.phase == "html")
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run_dir or make_run(args.data, args.keep or Path(tmp), args.subsets.split(","), args.rounds,
                                           args.turns)
        data = load_run(run_dir)
        calls = sum(r.calls for r in data.rows)
        print(f"{len({r.key for r in data.rows})} questions x {len(data.conditions)} conditions = {len(data.rows)} "
              f"rows, {calls} calls, {size_mb(run_dir / 'transcripts'):.0f} MB of transcripts ({run_dir})")
        print(f"  processes `report` reads them in here: {process_count(None, len(data.rows))} "
              f"(the CPUs this process may use: {len(os.sched_getaffinity(0))})")
        load = os.getloadavg()[0]
        f_wall, f_cpu, f_tree, _, _ = measure(run_dir, "floor")
        print(f"  floor (decode every transcript once, one process) wall {f_wall:6.2f} s  cpu {f_cpu:6.2f} s  "
              f"peak {f_tree:4.0f} MB  load {load:.2f}")
        for name in ("report", "html"):
            load = os.getloadavg()[0]
            wall, cpu, tree, peak, worker = measure(run_dir, name)
            cmd = "report --html" if name == "html" else "report"
            print(f"  medpanel {cmd:14s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  peak {tree:4.0f} MB (the process "
                  f"{peak:.0f} MB RSS, its largest worker {worker:.0f} MB)  = {wall / f_wall:5.1f}x the floor's "
                  f"wall, {cpu / f_cpu:5.1f}x its cpu  load {load:.2f}   target {TARGETS[name]}")
        load = os.getloadavg()[0]
        wall, cpu = whole_process(run_dir)
        print(f"  whole `python -m medpanel report` process wall {wall:6.2f} s  cpu {cpu:6.2f} s  load {load:.2f}   "
              f"target {TARGETS['process']}")
        if args.breakdown:
            load = os.getloadavg()[0]
            argv = [sys.executable, "-m", "benchmarks.bench_report", "--phase", "breakdown", str(run_dir)]
            lines = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()
            print(f"  where one `report`'s cpu goes (a fresh process, load {load:.2f}; the floor's cpu {f_cpu:.2f} s):")
            for line in lines:
                s, _, part = line.partition(" ")
                print(f"    {part:38s} {float(s):6.2f} s  = {float(s) / f_cpu:4.2f}x the floor's cpu")


if __name__ == "__main__":
    main()
