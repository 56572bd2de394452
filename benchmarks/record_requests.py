"""Run every shipped scenario (and example) on the scripted model and write every request it sent,
to diff what the agents are sent between two checkouts.

    python -m benchmarks.record_requests OUT [SCENARIO ...]

Each scenario runs as tests/test_scripted_scenarios.py runs it (3 packaged sample questions, one
round, the scripted model; `_overrides` there says why each override), with one worker so the order
of the calls is the pipeline's own, into OUT/<name>/run. OUT/<name>/requests.jsonl then holds, per
transcript in path order, every call's condition, question, repeat, role, agent, step and the
messages sent. Run it with each checkout's interpreter into two folders and `diff -r` the
requests.jsonl files; the run folders serve `benchmarks.render_outputs`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

import medpanel
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.files import file_per_pair
from medpanel.experiments.run.store.rundir import load_run, transcript_path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = 3
PACKAGED = ("sample", "freetext")
"""Dataset sources a shipped scenario may read from the package itself (freetext: its `sample`)."""


def overrides(path: Path) -> list[str]:
    """The `--set` overrides that run `path` on the scripted model; tests/test_scripted_scenarios.py
    runs every shipped scenario with the same ones and says why each is there."""
    raw: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    sets = ["model.backend=scripted", f"dataset.limit={QUESTIONS}"]
    dataset = raw.get("dataset") or {}
    if "parts" in dataset:  # several benchmarks' files (CLEAR's suite): the sample questions instead
        sets.append("dataset.parts=null")
    if dataset.get("source", "medagentsbench") not in PACKAGED:
        sets += ["dataset.source=sample", "dataset.path=null"]
    if dataset.get("source", "medagentsbench") != "freetext":
        sets.append("dataset.subsets=[medqa-style]")  # the limit is per subset: 3 questions in all
    if "rounds" in (raw.get("settings") or {}):
        sets.append("settings.rounds=1")
    sets += [f"{key}=null" for key in ("references", "budget_match") if key in raw]
    sets += ["models=[]"] if "models" in raw else []
    return sets


def transcripts_by_name(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each row's transcript under the file name it had when a run kept a file per question
    (`files.file_per_pair`), in that path order, so two checkouts' requests diff line by line
    whichever layout each writes."""
    named = [(file_per_pair((r.condition, r.dataset, r.qid, r.repeat)), r) for r in load_run(run_dir).rows]
    return [(old.name, json.loads(transcript_path(run_dir, row).read_bytes()))
            for old, row in sorted(named, key=lambda item: item[0])]


def record(path: Path, out: Path) -> int:
    """Run one scenario into out/run and write out/requests.jsonl; the number of requests."""
    here = Path.cwd()
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # an example's `pipeline: module:Class` sits beside it
    os.chdir(path.parent)  # files a scenario names are relative to its folder
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            scenario = load_scenario(path, overrides(path))
            result = medpanel.run(scenario, run_dir=out / "run", workers=1)
    finally:
        os.chdir(here)
    assert result.complete, (path, result.state, result.reason)
    n = 0
    with (out / "requests.jsonl").open("w", encoding="utf-8") as f:
        for name, doc in transcripts_by_name(out / "run"):
            for e in doc["events"]:
                if e["kind"] != "call":
                    continue
                n += 1
                f.write(json.dumps({"file": name, "role": e["role"], "agent": e["agent"], "step": e["step"],
                                    "round": e["round"], "turn": e["turn"], "messages": e["messages"]},
                                   ensure_ascii=False, sort_keys=True) + "\n")
    return n


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("scenarios", type=Path, nargs="*")
    args = parser.parse_args()
    os.environ.setdefault("MEDPANEL_CORPUS", "quickstart")
    os.environ.setdefault("MEDPANEL_WEB", "quickstart-web")
    paths = args.scenarios or sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))
    total = 0
    for p in paths:
        n = record(p.resolve(), args.out.resolve() / p.stem)
        total += n
        print(f"{p.stem}: {n} requests", flush=True)
    print(f"{len(paths)} scenarios, {total} requests")
