"""`model.batch` in real runs of the CLI against the fake Batch API: the same requests as a direct
run, byte for byte; the run summary says what the batches saved; and a runner killed (SIGKILL) while
its batch runs is resumed by collecting that batch: no line paid twice, every pair finished once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.fake_batch import FakeBatch
from medpanel.experiments.run.store.transcript_log import documents

from .conftest import write

ENV = {**os.environ, "MP_KEY": "sk-batch-test"}


def _scenario(tmp_path: Path, url: str, *, batch: bool = True, cache: str = "run") -> Path:
    block = "batch: {enabled: true, max_wait_s: 0.3, poll_s: 0.2}, " if batch else ""
    return write(tmp_path / f"s-{batch}-{cache}.yaml", f"""name: batched
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample}}
model: {{backend: openai, name: fake-model, base_url: "{url}", api_key_env: MP_KEY, {block}cache: "{cache}"}}
run: {{workers: 1, questions_per_worker: 24, prices: {{fake-model: {{input: 2.0, output: 8.0}}}}}}
""")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medpanel", "run", *args], capture_output=True, text=True,
                          timeout=240, env=ENV)


def _body(raw_line: bytes) -> bytes:
    return raw_line[raw_line.index(b', "body": ') + len(b', "body": '):-1]


def _rows(run_dir: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(run_dir / "study.db") as conn:
        return list(conn.execute("select condition, dataset, qid, repeat, error, cost_usd from mp_results"))


def test_a_batched_run_sends_the_requests_of_a_direct_run_byte_for_byte(tmp_path: Path) -> None:
    with FakeBatch(latency_s=0.2) as fake:
        direct = _run(str(_scenario(tmp_path, fake.base_url, batch=False, cache="off")),
                      "--run-dir", str(tmp_path / "direct"), "--quiet")
        assert direct.returncode == 0, direct.stdout + direct.stderr
        sent_direct = sorted(fake.direct_raw)
        batched = _run(str(_scenario(tmp_path, fake.base_url, cache="off")), "--run-dir", str(tmp_path / "batched"),
                       "--quiet")
        assert batched.returncode == 0, batched.stdout + batched.stderr
        assert len(fake.direct_raw) == len(sent_direct)  # the batched run sent nothing directly
        assert sorted(_body(line) for line in fake.raw_lines) == sent_direct
        assert len(sent_direct) >= 24


def test_the_summary_and_the_ledger_say_what_the_batches_saved(tmp_path: Path) -> None:
    with FakeBatch(latency_s=0.2) as fake:
        out = _run(str(_scenario(tmp_path, fake.base_url)), "--run-dir", str(tmp_path / "run"))
        assert out.returncode == 0, out.stdout + out.stderr
        lines = [line for line in out.stdout.splitlines() if line.startswith("Batches answered")]
        # 24 requests (the other 12 calls were answered by the run's cache), at half the listed price.
        assert len(lines) == 1 and lines[0].startswith("Batches answered 24 of 24 requests sent"), out.stdout
        usd = sum(r[5] for r in _rows(tmp_path / "run"))
        tokens = sum(b["request_counts"]["completed"] for b in fake.batches.values())
        assert tokens == 24
        # The fake's replies: 10 prompt + 5 completion tokens; $2 and $8 per million, halved.
        assert abs(usd - 24 * (10 * 1.0 + 5 * 4.0) / 1e6) < 1e-9
        assert f"${usd:.4f} less than sent one by one" in lines[0]
        report = subprocess.run([sys.executable, "-m", "medpanel", "report", str(tmp_path / "run")],
                                capture_output=True, text=True, timeout=120, env=ENV)
        assert "usd_saved_by_batch" in report.stdout + "".join(
            p.read_text() for p in (tmp_path / "run" / "report").glob("*ledger*"))


def _submitted(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run_dir / "batches").glob("*.json")) if (run_dir / "batches").is_dir() else []:
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue  # being written
        if doc.get("state") == "submitted":
            out.append(doc)
    return out


def test_a_run_killed_mid_batch_is_resumed_by_collecting_it_no_line_paid_twice(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with FakeBatch(latency_s=4.0) as fake:
        proc = subprocess.Popen([sys.executable, "-m", "medpanel", "run", str(_scenario(tmp_path, fake.base_url)),
                                 "--run-dir", str(run_dir), "--quiet"], env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        while not _submitted(run_dir) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        killed = _submitted(run_dir)
        assert killed, "no batch was submitted"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        ids = {d["batch_id"] for d in killed}
        assert all(fake.batches[i]["status"] in ("validating", "in_progress") for i in ids)  # killed mid-batch
        lines_before = len(fake.raw_lines)

        resumed = _run("--resume", str(run_dir), "--quiet")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr

        rows = _rows(run_dir)
        pairs = Counter(r[:4] for r in rows)
        assert len(pairs) == 24 and set(pairs.values()) == {1}  # every pair finished, once
        assert not any(r[4] for r in rows)
        assert max(fake.paid.values()) == 1  # no request answered (billed) twice
        assert max(Counter(_body(line) for line in fake.raw_lines).values()) == 1  # nor sent twice
        assert len(fake.raw_lines) >= lines_before
        # The killed batch's replies went to the resumed debates.
        answered_by = Counter()
        for raw in documents(run_dir):
            for e in json.loads(raw).get("events", []):
                if e.get("kind") == "call" and (e.get("data") or {}).get("batch"):
                    answered_by[e["data"]["batch"]] += 1
        assert ids & set(answered_by), (ids, answered_by)
        states = {json.loads(p.read_text())["state"] for p in (run_dir / "batches").glob("*.json")}
        assert states == {"delivered"}
