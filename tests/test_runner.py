"""The runner on real SQLite: 4 workers, no lost or duplicated pair, resume after SIGKILL and Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import record_path

from .conftest import write

SCRIPTED = """name: scripted
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample}}
model: {{backend: scripted, latency_ms: {latency}}}
run: {{workers: 4, shard_size: {shard}}}
"""


def _scenario(tmp_path: Path, latency: float = 0, shard: int = 1) -> Path:
    return write(tmp_path / "s.yaml", SCRIPTED.format(latency=latency, shard=shard))


def _rows(run_dir: Path) -> list[tuple[str, str, str, int]]:
    with sqlite3.connect(run_dir / "study.db") as conn:
        return list(conn.execute("select condition, dataset, qid, repeat from mp_results"))


def test_four_workers_complete_every_pair_once(tmp_path: Path) -> None:
    path = _scenario(tmp_path, latency=5, shard=1)
    plan = make_plan(load_scenario(path), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    status = runner.run(install_signals=False)
    assert status["state"] == "complete"
    rows = _rows(runner.run_dir)
    assert len(rows) == len(plan.pairs) == 24
    assert set(rows) == set(plan.pairs)
    store = Store(runner.storage_url, runner.run_dir)
    executions = Counter(store.executions())
    assert max(executions.values()) == 1, "a pair was executed twice"
    for row in store.rows():
        doc = json.loads(record_path(runner.run_dir, row.transcript).read_text())
        assert doc["events"], row
        assert doc["question"]["qid"] == row.qid
    meta = json.loads((runner.run_dir / "run.json").read_text())
    assert meta["versions"]["autogen-agentchat"] == "0.7.5"
    assert "commit" in meta["git"] and meta["n_pairs"] == 24


def test_resume_of_complete_run_runs_nothing(tmp_path: Path) -> None:
    plan = make_plan(load_scenario(_scenario(tmp_path)), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    runner.run(install_signals=False)
    again = Runner.open(runner.run_dir)
    status = again.run(install_signals=False)
    assert status["state"] == "complete"
    assert again.tally.done == 24  # counted from the store, nothing recomputed
    assert Counter(Store(again.storage_url, again.run_dir).executions()).most_common(1)[0][1] == 1


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "medpanel", "run", "--quiet", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait_rows(run_dir: Path, at_least: int, timeout: float = 60) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (run_dir / "study.db").exists():
            try:
                n = len(_rows(run_dir))
            except sqlite3.OperationalError:
                n = 0
            if n >= at_least:
                return n
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} rows after {timeout}s")


def test_sigkill_then_resume_completes_exactly_once(tmp_path: Path) -> None:
    path = _scenario(tmp_path, latency=40, shard=2)
    run_dir = tmp_path / "run"
    proc = _cli(str(path), "--run-dir", str(run_dir))
    _wait_rows(run_dir, 6)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(_rows(run_dir))
    assert 0 < before < 24
    resumed = _cli("--resume", str(run_dir))
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out
    rows = _rows(run_dir)
    assert len(rows) == 24 and len(set(rows)) == 24
    with sqlite3.connect(run_dir / "study.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("select count(*) from mp_claims").fetchone()[0] == 0


def test_sigint_stops_gracefully_then_resume(tmp_path: Path) -> None:
    path = _scenario(tmp_path, latency=60, shard=2)
    run_dir = tmp_path / "run"
    proc = _cli(str(path), "--run-dir", str(run_dir))
    _wait_rows(run_dir, 3)
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 3, out  # stopped, resumable
    assert "Resume with" in out
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["remaining"] > 0
    resumed = _cli("--resume", str(run_dir))
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out
    assert len(set(_rows(run_dir))) == 24 == len(_rows(run_dir))


def test_five_random_sigkills_then_resume_each_time(tmp_path: Path) -> None:
    import random

    rng = random.Random(11)
    path = _scenario(tmp_path, latency=100, shard=3)
    run_dir = tmp_path / "run"
    proc = _cli(str(path), "--run-dir", str(run_dir))
    deadline = time.time() + 60
    while not (run_dir / "run.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    kills = 0
    while kills < 5:
        time.sleep(rng.uniform(0.3, 1.2))  # a random point: start-up, mid-question, mid-commit
        if proc.poll() is not None:
            break  # finished before this kill: the remaining kills have nothing to interrupt
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        proc = _cli("--resume", str(run_dir))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert kills >= 3, "the run finished before enough kills landed; slow the scripted model down"
    rows = _rows(run_dir)
    assert len(rows) == 24 and len(set(rows)) == 24
    with sqlite3.connect(run_dir / "study.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("select count(*) from mp_claims").fetchone()[0] == 0


def test_a_failed_commit_releases_its_pair_and_resume_finishes(tmp_path: Path, monkeypatch) -> None:
    """A failing commit must still free its pair (on the loop's thread or in a thread of the store)."""
    import threading

    real_commit = Store.stage  # where every commit starts (the transcript, then the row)
    calls = {"n": 0}
    lock = threading.Lock()

    def flaky(self: Store, *args, **kwargs):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == 5:
            raise OSError("disk full")
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(Store, "stage", flaky)
    plan = make_plan(load_scenario(_scenario(tmp_path, shard=24)), base_dir=tmp_path)
    plan.scenario = plan.scenario.model_copy(update={"run": plan.scenario.run.model_copy(update={"workers": 1})})
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    status = runner.run(install_signals=False)
    assert status["state"] == "incomplete" and status["remaining"] > 0
    with sqlite3.connect(runner.run_dir / "study.db") as conn:
        assert conn.execute("select count(*) from mp_claims").fetchone()[0] == 0, "a failed commit kept its claim"
    assert runner.tally.done == len(_rows(runner.run_dir)) == 4, "the tally must count exactly the committed pairs"

    monkeypatch.setattr(Store, "stage", real_commit)
    again = Runner.open(runner.run_dir)
    assert again.run(install_signals=False)["state"] == "complete"
    rows = _rows(runner.run_dir)
    assert len(rows) == 24 and len(set(rows)) == 24


def test_progress_counts_each_commit_once_as_it_lands(tmp_path: Path) -> None:
    plan = make_plan(load_scenario(_scenario(tmp_path, latency=5, shard=3)), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    seen: list[int] = []
    runner.run(progress=lambda t, total: seen.append(t.done), install_signals=False)
    assert sorted(seen) == list(range(1, 25)), seen
    assert runner.tally.done == 24


def test_a_reopened_run_skips_optunas_schema_check_only_for_the_same_version(tmp_path: Path, monkeypatch) -> None:
    import optuna

    plan = make_plan(load_scenario(_scenario(tmp_path)), base_dir=tmp_path)
    run_dir = Runner.create(plan, run_dir=tmp_path / "run").run_dir
    seen: list[bool] = []
    real = optuna.storages.RDBStorage

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args, **kwargs) -> None:
            seen.append(kwargs.get("skip_compatibility_check", False))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", Spy)
    assert Runner.open(run_dir).run(install_signals=False)["state"] == "complete"
    assert seen == [True]
    meta = json.loads((run_dir / "run.json").read_text())
    meta["versions"]["optuna"] = "0.0.1"
    (run_dir / "run.json").write_text(json.dumps(meta))
    with sqlite3.connect(run_dir / "study.db") as conn:  # a run made so keeps that run.json in its study too
        conn.execute("update mp_meta set value = ? where key = 'run_json'", (json.dumps(meta),))
    conn.close()
    seen.clear()
    Runner.open(run_dir)._optuna_storage()
    assert seen == [False]


def test_an_error_in_the_progress_hook_is_raised_not_swallowed(tmp_path: Path) -> None:
    plan = make_plan(load_scenario(_scenario(tmp_path, shard=24)), base_dir=tmp_path)
    plan.scenario = plan.scenario.model_copy(update={"run": plan.scenario.run.model_copy(update={"workers": 1})})
    runner = Runner.create(plan, run_dir=tmp_path / "run")

    def hook(t, total: int) -> None:
        if t.done == 3:
            raise RuntimeError("progress display broke")

    status = runner.run(progress=hook, install_signals=False)
    assert status["state"] == "incomplete"  # the trial failed on the hook's error instead of running on
    assert len(_rows(runner.run_dir)) == 3
    with sqlite3.connect(runner.run_dir / "study.db") as conn:
        assert conn.execute("select count(*) from mp_claims").fetchone()[0] == 0


def test_overrides_are_validated_like_the_yaml_on_every_path(tmp_path: Path) -> None:
    # make_plan (run), Runner.override (run, --resume, worker): model_copy(update=...) used to skip
    # validation, so --workers 0 crashed and --max-calls -5 halted at once as "budget reached".
    sc = load_scenario(_scenario(tmp_path))
    with pytest.raises(UserError, match=r"^--workers: .*greater than or equal to 1"):
        make_plan(sc, base_dir=tmp_path, workers=0)
    with pytest.raises(UserError, match=r"^--repeat: "):
        make_plan(sc, base_dir=tmp_path, repeats=0)
    with pytest.raises(UserError, match=r"^--limit: "):
        make_plan(sc, base_dir=tmp_path, limit=0)
    runner = Runner.create(make_plan(sc, base_dir=tmp_path), run_dir=tmp_path / "run")
    for values, option in [({"max_calls": -5}, "--max-calls"), ({"max_wall_s": -1.0}, "--max-wall-s"),
                           ({"requests_per_minute": 0.0}, "--rpm"), ({"workers": 0}, "--workers")]:
        with pytest.raises(UserError, match=f"^{option}: "):
            runner.override(**values)
    runner.override(max_calls=7, workers=2)
    assert runner.plan.scenario.run.max_calls == 7 and runner.budget.max_calls == 7
    assert runner.plan.scenario.run.workers == 2


def test_an_unreachable_storage_leaves_no_run_directory(tmp_path: Path) -> None:
    plan = make_plan(load_scenario(_scenario(tmp_path), ["run.storage=postgresql://u@127.0.0.1:1/db"]),
                     base_dir=tmp_path)
    with pytest.raises(UserError, match="cannot open the study storage postgresql"):
        Runner.create(plan, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_damaged_study_db_is_one_line_naming_it(tmp_path: Path) -> None:
    plan = make_plan(load_scenario(_scenario(tmp_path)), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    runner.run(install_signals=False)
    with sqlite3.connect(runner.run_dir / "study.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # A copy no connection of this process holds (a pooled one would write its WAL back over the damage).
    run_dir = Path(shutil.copytree(runner.run_dir, tmp_path / "copy"))
    db = run_dir / "study.db"
    data = bytearray(db.read_bytes())
    data[4096:4096 * 3] = bytes(range(256)) * 32  # the result table's pages; the schema page is intact
    db.write_bytes(bytes(data))
    with pytest.raises(UserError) as info:
        Store(f"sqlite:///{db}", run_dir)
    assert str(db) in str(info.value) and "damaged" in str(info.value)
    with pytest.raises(UserError, match="study database is damaged"):
        Runner.open(run_dir).run(install_signals=False)


def test_a_session_collects_less_while_it_works_and_leaves_the_collector_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from medpanel.experiments.run.execution import collector
    from medpanel.experiments.run.execution.worker import Worker

    seen: list[tuple[tuple[int, int, int], int]] = []
    real_work = Worker.work

    async def work(self: Worker, shard: list) -> tuple[int, int]:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return await real_work(self, shard)

    monkeypatch.setattr(Worker, "work", work)
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        runner = Runner.create(make_plan(load_scenario(_scenario(tmp_path, shard=24)), base_dir=tmp_path),
                               run_dir=tmp_path / "run")
        assert runner.run(install_signals=False)["state"] == "complete"
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*before)
    assert seen and all(t == (collector.GC_YOUNG_THRESHOLD, 10, 10) and frozen > 0 for t, frozen in seen)
