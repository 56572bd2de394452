"""A run directory another process is running is refused before its study is opened.

A runner stopped mid-commit (SIGSTOP, a debugger, a laptop lid) holds SQLite's write lock; a second
`medpanel run --resume` that opened the study first waited on it (up to the 60 s busy timeout)
before it reached the runner lock that refuses it.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.runlock import run_lock

from .conftest import write


def test_a_running_directory_is_refused_before_its_study_is_opened(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", "name: held\npipeline: generalist\ndataset: {source: sample, limit: 1}\n"
                                   "model: {backend: scripted}\n")
    run_dir = tmp_path / "run"
    Runner.create(make_plan(load_scenario(f), base_dir=tmp_path), run_dir=run_dir)
    with run_lock(run_dir, "another-runner"):
        holder = sqlite3.connect(run_dir / "study.db", timeout=0, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the other runner, stopped in the middle of a commit
        try:
            started = time.monotonic()
            with pytest.raises(UserError, match="is being run by process"):
                Runner.open(run_dir)
            assert time.monotonic() - started < 30  # refused at once, not after SQLite's 60 s wait
        finally:
            holder.execute("ROLLBACK")
            holder.close()
