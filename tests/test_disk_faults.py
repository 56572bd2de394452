"""The run's own storage failing mid-run (a full disk, a read-only folder) stops it with one line,
keeps what was done, and a resume after the fix finishes it.

The real cases need root (a small tmpfs, a read-only bind mount) and skip without it; the injected
cases raise the same OSError from the store's own file writes, so they run everywhere.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store import confined, transcript_log
from medpanel.experiments.run.store import files as store_module
from medpanel.experiments.run.store.transcript_log import record_path

from .conftest import write

SCENARIO = """name: disk
pipeline: generalist
flags: {c: [0, 1]}
dataset: {source: sample}
model: {backend: scripted}
run: {workers: 4}
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medpanel", "run", "--quiet", *args], capture_output=True,
                          text=True, timeout=180)


def _rows(run_dir: Path) -> list[tuple[str, str, str, int, str]]:
    with sqlite3.connect(run_dir / "study.db") as conn:
        return list(conn.execute("select condition, dataset, qid, repeat, transcript from mp_results"))


def _consistent(run_dir: Path) -> int:
    """Every row's transcript is there and is that row's; the database is sound. Returns the row count."""
    rows = _rows(run_dir)
    assert len(rows) == len({r[:4] for r in rows})
    for condition, _, qid, repeat, path in rows:
        doc = json.loads(record_path(run_dir, path).read_text())
        assert (doc["condition"], doc["question"]["qid"], doc["repeat"]) == (condition, qid, repeat)
    with sqlite3.connect(run_dir / "study.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return len(rows)


def _assert_stopped(out: subprocess.CompletedProcess[str], run_dir: Path, cause: str, path: Path) -> None:
    logs = out.stdout + out.stderr
    assert out.returncode == 3, logs
    assert "Traceback" not in logs and "Trial " not in logs, logs  # no Optuna trial tracebacks either
    stop = [line for line in logs.splitlines() if line.startswith("Run stopped:")]
    assert len(stop) == 1 and cause in stop[0] and str(path) in stop[0], logs
    # No flood of lines: besides the summary tables' rows (which grew with the study and transition tables), the
    # output is the start lines, the stop line, the tables' titles and notes and the resume hint.
    boxes = ("┃", "│", "┏", "┡", "└", "┗", "╭", "╰")
    assert len([line for line in logs.splitlines() if not line.lstrip().startswith(boxes)]) < 60, logs
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and cause in status["reason"] and str(path) in status["reason"], status


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)):
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_disk_that_fills_up_mid_run_stops_it_with_one_line(tmp_path: Path, small_disk: Path) -> None:
    scenario = write(tmp_path / "s.yaml", SCENARIO)
    run_dir = small_disk / "run"
    first = _cli(str(scenario), "--run-dir", str(run_dir), "--max-calls", "4")
    assert first.returncode == 3, first.stdout + first.stderr  # a few questions done, the rest to resume
    before = _consistent(run_dir)
    assert 0 < before < 24
    # Fill the disk, then leave room for a few more commits only.
    filler = small_disk / "filler"
    # Unbuffered: a buffered file would raise ENOSPC again when it flushes on close.
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    os.truncate(filler, filler.stat().st_size - 96 * 1024)
    full = _cli("--resume", str(run_dir))
    _assert_stopped(full, run_dir, "No space left on device", run_dir)
    during = _consistent(run_dir)
    assert before <= during < 24
    filler.unlink()
    again = _cli("--resume", str(run_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    assert _consistent(run_dir) == 24


def test_a_read_only_transcripts_folder_stops_the_run_with_one_line(tmp_path: Path) -> None:
    scenario = write(tmp_path / "s.yaml", SCENARIO)
    run_dir = tmp_path / "run"
    first = _cli(str(scenario), "--run-dir", str(run_dir), "--max-calls", "4")
    assert first.returncode == 3, first.stdout + first.stderr
    before = _consistent(run_dir)
    folder = run_dir / "transcripts"
    # Root ignores file modes, so the folder is made read-only by a read-only bind mount.
    if os.geteuid() != 0 or not _mount("--bind", str(folder), str(folder)):
        pytest.skip("a read-only bind mount needs root (CAP_SYS_ADMIN)")
    try:
        assert _mount("-o", "remount,bind,ro", str(folder))
        readonly = _cli("--resume", str(run_dir))
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    _assert_stopped(readonly, run_dir, "Read-only file system", folder)
    assert _consistent(run_dir) == before  # nothing lost, nothing half-written
    again = _cli("--resume", str(run_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    assert _consistent(run_dir) == 24


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_an_injected_write_failure_stops_the_run_and_keeps_what_was_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int) -> None:
    plan = make_plan(load_scenario(write(tmp_path / "s.yaml", SCENARIO)), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    made = {"n": 0}

    class Failing:  # the transcript writes after the fifth fail, as a full disk would
        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        def write(self, fd: int, data: bytes) -> int:
            made["n"] += 1
            if made["n"] > 5:
                raise OSError(code, os.strerror(code))
            return os.write(fd, data)

    monkeypatch.setattr(transcript_log, "os", Failing())
    with caplog.at_level(logging.WARNING):
        status = runner.run(install_signals=False)
    assert status["state"] == "stopped", status
    assert status["reason"].startswith(f"cannot write {runner.run_dir / 'transcripts'}")
    assert os.strerror(code) in status["reason"]
    assert json.loads((runner.run_dir / "status.json").read_text())["reason"] == status["reason"]
    assert not [r for r in caplog.records if "failed" in r.getMessage()], "trials failed with tracebacks"
    assert _consistent(runner.run_dir) == 5
    with sqlite3.connect(runner.run_dir / "study.db") as conn:
        assert conn.execute("select count(*) from mp_claims").fetchone()[0] == 0
    monkeypatch.setattr(transcript_log, "os", os)
    assert Runner.open(runner.run_dir).run(install_signals=False)["state"] == "complete"
    assert _consistent(runner.run_dir) == 24


def test_a_status_file_on_a_full_disk_is_overwritten_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "status.json"
    store_module.write_status(tmp_path, {"state": "running"})

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path))

    monkeypatch.setattr(confined, "new_temporary", full)
    store_module.write_status(tmp_path, {"state": "stopped", "reason": "cannot write x: No space left on device"})
    assert json.loads(path.read_text())["state"] == "stopped"
