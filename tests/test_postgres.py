"""Distributed workers on a real PostgreSQL server: two processes share one grid, each pair once.

CI starts a throwaway server with .ci/start_postgres.sh and sets MEDPANEL_TEST_PG_URL.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from medpanel.experiments.run.store.transcript_log import count_records

from .conftest import needs_postgres, write

pytestmark = needs_postgres


def _rows(url: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("select condition, dataset, qid, repeat from mp_results").fetchall()


def _runner_and_worker(scenario: Path, pg_url: str, main_dir: Path,
                       worker_dir: Path) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    """`medpanel run` on PostgreSQL, and a `medpanel worker` joining it once its run.json exists."""
    runner = subprocess.Popen([sys.executable, "-m", "medpanel", "run", str(scenario), "--storage", pg_url,
                               "--run-dir", str(main_dir), "--quiet"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while not (main_dir / "run.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    worker = subprocess.Popen([sys.executable, "-m", "medpanel", "worker", pg_url, "--run-dir", str(worker_dir),
                               "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return runner, worker


def test_two_workers_share_one_grid_each_pair_once(tmp_path: Path, pg_url: str) -> None:
    # The scripted model is slow enough (600 ms a call) that the main runner alone would take far
    # longer than the second process needs to start, even on a loaded 2-core machine.
    f = write(tmp_path / "s.yaml", "name: pg\npipeline: generalist\nflags: {c: [0, 1]}\ndataset: {source: sample}\n"
                                   "model: {backend: scripted, latency_ms: 600}\nrun: {workers: 2, shard_size: 3}\n")
    main_dir = tmp_path / "main"
    runner, worker = _runner_and_worker(f, pg_url, main_dir, tmp_path / "worker")
    out_w, _ = worker.communicate(timeout=180)
    out_r, _ = runner.communicate(timeout=180)
    assert worker.returncode == 0, out_w
    assert runner.returncode == 0, out_r
    rows = _rows(pg_url)
    assert len(rows) == 24 and len(set(rows)) == 24
    import psycopg

    with psycopg.connect(pg_url) as conn:
        owners = Counter(r[0].split(":")[1] for r in conn.execute("select worker from mp_results"))
        execs = Counter(conn.execute("select condition, dataset, qid, repeat from mp_executions").fetchall())
        assert conn.execute("select count(*) from mp_claims").fetchone()[0] == 0
    assert len(owners) == 2, f"both processes should have done work: {owners}"
    assert max(execs.values()) == 1
    # the run directory gets every transcript, including those the other process committed
    report = subprocess.run([sys.executable, "-m", "medpanel", "report", str(main_dir)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert count_records(main_dir) == 24


def test_worker_on_an_empty_database_is_a_clear_error(pg_url: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "medpanel", "worker", pg_url], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "no medpanel run" in proc.stderr and "Traceback" not in proc.stderr


def test_a_runner_and_a_worker_with_hundreds_in_flight_execute_each_pair_exactly_once(tmp_path: Path,
                                                                                     pg_url: str) -> None:
    # 12 questions x 2 conditions x 20 repeats = 480 pairs at 50 ms a call, 2 workers x 64 lanes in
    # each process: claims and commits race all the time, which is where a pair ran twice before.
    f = write(tmp_path / "s.yaml", "name: pgload\npipeline: generalist\nflags: {c: [0, 1]}\ndataset: {source: sample}\n"
                                   "model: {backend: scripted, latency_ms: 50, cache: 'off'}\n"
                                   "run: {workers: 2, questions_per_worker: 64, repeats: 20}\n")
    main_dir = tmp_path / "main"
    runner, worker = _runner_and_worker(f, pg_url, main_dir, tmp_path / "worker")
    out_w, _ = worker.communicate(timeout=300)
    out_r, _ = runner.communicate(timeout=300)
    assert runner.returncode == 0, out_r[-3000:]
    assert worker.returncode == 0, out_w[-3000:]
    import psycopg

    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("select condition, dataset, qid, repeat from mp_results").fetchall()
        execs = Counter(conn.execute("select condition, dataset, qid, repeat from mp_executions").fetchall())
    assert len(rows) == 480 and len(set(rows)) == 480
    twice = {pair: n for pair, n in execs.items() if n > 1}
    assert not twice, f"pairs executed more than once: {twice}"
    assert set(execs) == set(rows)
