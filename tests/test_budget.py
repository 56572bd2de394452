"""Budgets and halt controls: a spent budget stops the run cleanly; a higher budget finishes it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.transcript_log import documents
from medpanel.experiments.run.tracking.budget import RateLimiter

from .conftest import write

SCENARIO = """name: budget
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample}}
model: {{backend: scripted, name: priced-model}}
run: {{workers: 2, shard_size: 4{extra}}}
"""


def _rows(run_dir: Path) -> list[tuple]:
    with sqlite3.connect(run_dir / "study.db") as conn:
        return conn.execute("select condition, dataset, qid, calls from mp_results").fetchall()


def _runner(tmp_path: Path, extra: str = "") -> Runner:
    f = write(tmp_path / "s.yaml", SCENARIO.format(extra=extra))
    return Runner.create(make_plan(load_scenario(f), base_dir=tmp_path), run_dir=tmp_path / "run")


def test_max_calls_halts_then_a_higher_budget_finishes(tmp_path: Path) -> None:
    runner = _runner(tmp_path, ", max_calls: 10")
    status = runner.run(install_signals=False)
    assert status["state"] == "stopped" and "max_calls=10" in status["reason"] and "--max-calls" in status["reason"]
    done = _rows(runner.run_dir)
    assert 0 < len(done) < 24
    # at most the questions already in flight may finish after the limit is reached
    assert sum(r[3] for r in done) < 10 + 2 * 3
    with sqlite3.connect(runner.run_dir / "study.db") as conn:
        assert conn.execute("select count(*) from mp_claims").fetchone()[0] == 0
    again = Runner.open(runner.run_dir)
    again.override(max_calls=1000)
    assert again.run(install_signals=False)["state"] == "complete"
    rows = _rows(runner.run_dir)
    assert len(rows) == 24 and len({r[:3] for r in rows}) == 24


def test_cost_budget_uses_the_scenario_prices(tmp_path: Path) -> None:
    runner = _runner(tmp_path, ", max_cost_usd: 0.0001, prices: {priced-model: {input: 1.0, output: 2.0}}")
    status = runner.run(install_signals=False)
    assert status["state"] == "stopped" and "max_cost_usd" in status["reason"]
    assert runner.tally.cost_usd > 0
    doc = json.loads(next(documents(runner.run_dir)))
    assert doc["cost_usd"] > 0


def test_rate_limit_is_shared_and_spaces_requests() -> None:
    limiter = RateLimiter(per_minute=1200)  # one request every 50 ms

    async def burst() -> None:
        await asyncio.gather(*(limiter.acquire() for _ in range(10)))

    t0 = time.monotonic()
    asyncio.run(burst())
    assert time.monotonic() - t0 >= 0.45


def test_cli_budget_stop_exits_3_with_the_reason(tmp_path: Path) -> None:
    f = write(tmp_path / "s.yaml", SCENARIO.format(extra=""))
    proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(f), "--run-dir", str(tmp_path / "r"),
                           "--quiet", "--max-calls", "5"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert "max_calls=5" in proc.stdout and "--resume" in proc.stdout
    resumed = subprocess.run([sys.executable, "-m", "medpanel", "run", "--resume", str(tmp_path / "r"), "--quiet",
                              "--max-calls", "500"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout
    assert len(_rows(tmp_path / "r")) == 24
