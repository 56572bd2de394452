"""Run directories for the hostile run-directory tests: a created run (every pair pending), a
finished one, and what a case plants in a copy of either (links, hard links, FIFOs)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario, load_scenario
from tests.test_bad_inputs import GOOD, Result, invoke, shape_problem

__all__ = ["GOOD", "Result", "invoke", "shape_problem"]

SCENARIO = GOOD.replace("limit: 1", "limit: 2")
"""Two conditions (c0, c1) x two questions: four pairs."""


def created_run(root: Path, body: str = SCENARIO, name: str = "run") -> Path:
    """A run made and never started: run.json, questions.jsonl and its study, every pair to do."""
    scenario = root / f"{name}.yaml"
    scenario.write_text(body, encoding="utf-8")
    plan = make_plan(load_scenario(scenario), base_dir=root)
    return Runner.create(plan, run_dir=root / name, scenario_file=str(scenario)).run_dir


def completed(scenario: Mapping[str, object], root: Path) -> Runner:
    """A scenario given as a dict, run to its end in `root / "run"` by the runner itself (no CLI)."""
    runner = Runner.create(make_plan(Scenario.model_validate(scenario), base_dir=root), run_dir=root / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner


def finished_run(root: Path, body: str = SCENARIO, name: str = "run") -> Path:
    scenario = root / f"{name}.yaml"
    scenario.write_text(body, encoding="utf-8")
    res = invoke(["run", str(scenario), "--run-dir", str(root / name), "--quiet"])
    assert res.rc == 0, res.err + res.tb
    with sqlite3.connect(root / name / "study.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # copies then hold every page in study.db itself
    return root / name


def copy_run(base: Path, dest: Path) -> Path:
    shutil.copytree(base, dest, symlinks=True)
    return dest


def fingerprint(path: Path) -> str:
    """What is at `path` (a file's bytes, a folder's whole tree, or nothing), to show it unchanged."""
    if path.is_symlink() or not path.exists():
        return "absent" if not path.exists() else f"link {os.readlink(path)}"
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return "\n".join(f"{p.relative_to(path)} {fingerprint(p) if p.is_file() else 'dir'}"
                     for p in sorted(path.rglob("*")))


def transcripts(run_dir: Path) -> dict[str, str]:
    """Every transcript file of a run (the workers' logs, or an older run's file per question) and its
    bytes' hash."""
    return {str(p.relative_to(run_dir)): fingerprint(p) for p in sorted((run_dir / "transcripts").rglob("*"))
            if p.is_file()}


@dataclass
class Outcome:
    res: Result
    argv: list[str]

    def refused(self, names: str) -> None:
        """One `error:` line, exit 2, no traceback, naming `names`."""
        problem = shape_problem(self.res)
        assert problem is None, f"{self.argv}: {problem}"
        assert names in self.res.err, f"{self.argv}: the line does not name {names!r}: {self.res.err}"


def run_cli(argv: list[str]) -> Outcome:
    return Outcome(invoke(argv), argv)


def to_file_per_question(run_dir: Path, name_of: Callable[[tuple[str, str, str, int]], str]) -> list[str]:
    """Turn a run written with transcript logs into a run of the older layout, a file per question:
    each row's record written to `name_of(pair)` (relative to the run), the row pointed at it, the
    logs removed. The new paths, in row order."""
    from medpanel.experiments.run.store.transcript_log import log_files, record_path

    names = []
    with sqlite3.connect(run_dir / "study.db") as conn:
        rows = conn.execute('select condition, dataset, qid, "repeat", transcript from mp_results').fetchall()
        for condition, dataset, qid, repeat, ref in rows:
            name = name_of((condition, dataset, qid, repeat))
            (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / name).write_bytes(record_path(run_dir, ref).read_bytes())
            conn.execute('update mp_results set transcript = ? where condition = ? and dataset = ? and qid = ? '
                         'and "repeat" = ?', (name, condition, dataset, qid, repeat))
            names.append(name)
    for log in log_files(run_dir):
        log.unlink()
    return names
