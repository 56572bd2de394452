"""No wait without end: a long Retry-After stops the run resumably, and the grace period after a
Ctrl-C or SIGTERM bounds the whole stop (in-flight calls are cancelled when it ends).

Real subprocesses and real signals, as in tests/test_interrupts.py. Each run would take minutes
(or a day) if its wait were not cut short, so a generous `communicate` timeout tells "cut short"
from "waited" without depending on the machine's speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .conftest import write
from .fake_openai import FakeOpenAI
from .test_interrupts import _count


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "medpanel", "run", "--quiet", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})


def test_a_retry_after_longer_than_the_cap_stops_the_run_naming_the_endpoint(tmp_path: Path) -> None:
    def day(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        return 429, {"retry-after": "86400"}, {"error": {"message": "come back tomorrow", "type": "rate_limit"}}

    with FakeOpenAI(day) as srv:
        scenario = write(tmp_path / "s.yaml", f"""name: waits
pipeline: generalist
flags: {{c: [0]}}
dataset: {{source: sample, limit: 1}}
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", cache: "off"}}
run: {{workers: 2, max_retry_wait_s: 5}}
""")
        run_dir = tmp_path / "run"
        proc = _cli(str(scenario), "--run-dir", str(run_dir), env={"OPENAI_API_KEY": "sk-test"})
        try:
            out, _ = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 3, out
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped", status
    assert srv.base_url in status["reason"] and "86,400 s" in status["reason"], status["reason"]
    assert "run.max_retry_wait_s" in status["reason"]
    assert "Resume with" in out and srv.base_url in out
    assert _count(run_dir, "mp_results") == 0 and _count(run_dir, "mp_claims") == 0  # all redone on resume


def test_the_grace_period_bounds_the_whole_stop(tmp_path: Path) -> None:
    # 100 s model calls and a 1 s grace: the stop must cancel them, not wait for them.
    scenario = write(tmp_path / "s.yaml", """name: grace
pipeline: generalist
flags: {c: [1]}
dataset: {source: sample}
model: {backend: scripted, latency_ms: 100000}
run: {workers: 4, shard_size: 2, interrupt_grace_s: 1}
""")
    run_dir = tmp_path / "run"
    proc = _cli(str(scenario), "--run-dir", str(run_dir))
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if (run_dir / "study.db").exists() and _count(run_dir, "mp_executions") >= 4:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)  # far under the 100 s a call would take
    finally:
        proc.kill()
    assert proc.returncode == 3, out
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped"
    assert status["reason"].startswith("interrupted (SIGTERM)") and "still running after 1 s" in status["reason"]
    assert _count(run_dir, "mp_results") == 0 and _count(run_dir, "mp_claims") == 0
