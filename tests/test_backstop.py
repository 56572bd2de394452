"""A question that ignores its cancellation cannot outlast the grace period either.

The pipeline below blocks its event loop in `time.sleep`, which no asyncio cancellation reaches.
After SIGTERM and a 1-second grace period, the process must write status.json and exit 3 a few
seconds later, long before the 120-second sleep would end. Real subprocess, real signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import write

PIPELINE = '''
import time
import medpanel as mp


class Stuck(mp.Pipeline[mp.PipelineSettings, mp.ConditionPlan]):
    async def __call__(self, question, plan, session, settings):
        open(__import__("os").environ["STUCK_MARK"], "w").close()
        time.sleep(120)  # blocks the event loop: cancelling the task cannot interrupt it
        raise AssertionError("not reached")
'''


def test_a_question_that_ignores_cancellation_is_ended_after_the_grace_period(tmp_path: Path) -> None:
    write(tmp_path / "stuck_pipeline.py", PIPELINE)
    scenario = write(tmp_path / "s.yaml", "name: stuck\npipeline: stuck_pipeline:Stuck\n"
                                          "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n"
                                          "run: {workers: 1, interrupt_grace_s: 1}\n")
    run_dir, mark = tmp_path / "run", tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "STUCK_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "medpanel", "run", str(scenario), "--run-dir", str(run_dir),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not mark.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert mark.exists(), proc.communicate(timeout=5)[0]
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=100)  # the sleep would take 120 s
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 3, out
    assert took < 100, took  # cut short, not waited out
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped", status
    assert "SIGTERM" in status["reason"] and "after the grace period" in status["reason"], status
