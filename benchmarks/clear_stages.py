"""Every transcript's trajectory of some run directories, one JSON line each, to diff two checkouts.

    python -m benchmarks.clear_stages OUT.jsonl RUN_DIR [RUN_DIR ...]

Each line holds a transcript's file name, its trajectory kind, and per stage its label, cells
(agent or pathway -> position and status), majority, state, first event and interventions (kind,
detail, event). Run it with the interpreter of a checkout that reads CLEAR's stages from step
names and of one that reads them from acts, on the same runs, and `diff` the files: every stage,
verdict and ruling the names gave, the acts give. It prints how many transcripts, stages and
interventions it wrote.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from benchmarks.record_requests import transcripts_by_name
from medpanel.experiments.analysis.trajectory import trajectory


def stages_of(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for name, doc in transcripts_by_name(run_dir):
        t = trajectory(doc)
        out.append({"run": run_dir.name, "file": name, "condition": t.condition, "kind": t.kind,
                    "stages": [dataclasses.asdict(s) for s in t.stages]})
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    lines = [line for run in args.runs for line in stages_of(run)]
    with args.out.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, sort_keys=True, default=list) + "\n")
    stages = [s for line in lines for s in line["stages"]]
    print(f"{len(lines)} transcripts ({sum(line['kind'] == 'clear' for line in lines)} read as CLEAR's), "
          f"{len(stages)} stages, {sum(len(s['before']) for s in stages)} interventions")
