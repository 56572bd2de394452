"""Benchmark: `medpanel report` and the HTML viewer on a scripted 862 x 4 run (issue 17's targets:
report <= 10 s, HTML <= 30 s).

    python -m benchmarks.bench_report [--run-dir DIR] [--data ../shared/data/medagentsbench]

Without `--run-dir` it first runs the c x r panel 2x2 on the hard set (every subset's
test_hard.jsonl, 862 questions) with the scripted model, 1 round of 2 turns, into a temporary
folder. Printed: wall and CPU seconds of the tables (every table of the report, the ledger read
from the 3,448 transcripts, report.md and CSVs written) and of the HTML site (tables, plots,
question pages), each against its target.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import medpanel
from medpanel.experiments.analysis.report import build_tables, write_report
from medpanel.experiments.analysis.study import transcript_events
from medpanel.experiments.run.rundir import load_run
from medpanel.experiments.view.viewer import build_site

SUBSETS = ["medqa", "pubmedqa", "medmcqa", "medbullets", "medexqa", "medxpertqa-r", "medxpertqa-u", "mmlu",
           "mmlu-pro"]
SCENARIO = {
    "name": "bench-report-2x2", "pipeline": "panel", "flags": {"c": [0, 1], "r": [0, 1]},
    "settings": {"rounds": 1, "turns_per_round": 2},
    "compare": [["c0r0", "c1r0"], ["c1r0", "c1r1"], ["c0r0", "c0r1"], ["c0r1", "c1r1"]],
    "model": {"backend": "scripted"},
    "run": {"workers": 2, "prices": {"scripted": {"input": 0.15, "output": 0.6}}},
}


def make_run(data: Path, root: Path) -> Path:
    sc = {**SCENARIO, "dataset": {"source": "medagentsbench", "path": str(data.resolve()), "subsets": SUBSETS}}
    res = medpanel.run(sc, run_dir=root / "run")
    return Path(res.run_dir)


def clock(f: object) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    f()  # type: ignore[operator]
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/medagentsbench"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run_dir or make_run(args.data, Path(tmp))
        data = load_run(run_dir)
        n_q = len({r.key for r in data.rows})

        def report() -> None:
            d = load_run(run_dir)
            write_report(run_dir, build_tables(d.rows, d.meta, events=transcript_events(run_dir)))

        rw, rc = clock(report)
        hw, hc = clock(lambda: build_site(run_dir))
        print(f"{n_q} questions x {len(data.conditions)} conditions = {len(data.rows)} rows ({run_dir})")
        print(f"  report (tables + ledger + files)  wall {rw:6.2f} s  cpu {rc:6.2f} s   target <= 10 s")
        print(f"  HTML (tables, plots, pages)       wall {hw:6.2f} s  cpu {hc:6.2f} s   target <= 30 s")


if __name__ == "__main__":
    main()
