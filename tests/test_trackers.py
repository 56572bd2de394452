"""`run.tracker: mlflow | wandb`: config as params, live per-condition metrics, the report as an artifact,
one tracker run across an interrupted run and its resume.

MLflow writes to a local file store (`file:` URI) and is driven through the real CLI; W&B runs in
offline mode through `medpanel.run` / `medpanel.resume`. Each run is stopped by a call budget part
way and resumed. A socket guard refuses every connection that is not loopback or a Unix socket, so
neither can reach the network.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

import medpanel
from medpanel.experiments.cli.run import register
from medpanel.experiments.run.tracking.tracker import flatten

from .inspect_fixtures import run_rows


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if self.family == socket.AF_UNIX or (isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1",
                                                                                                 "localhost")):
            return real(self, address)
        raise AssertionError(f"network access to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", guarded)


SCENARIO: dict[str, Any] = {
    "name": "tracked", "pipeline": "generalist", "flags": {"c": [0, 1]},
    "model": {"backend": "scripted", "cache": "off"},
    "dataset": {"source": "sample", "subsets": ["medqa-style"], "limit": 3},
    "run": {"workers": 1, "questions_per_worker": 1}}
PART = "4"
"""The first session's call budget: it stops with some pairs of each condition done and some left."""


def _scenario(tracker: str) -> dict[str, Any]:
    return {**SCENARIO, "run": {**SCENARIO["run"], "tracker": tracker}}


def _expected(run_dir: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in run_rows(run_dir):
        m = out.setdefault(r.condition, {"correct": 0, "done": 0, "calls": 0, "tokens": 0})
        m["correct"] += r.correct
        m["done"] += 1
        m["calls"] += r.calls
        m["tokens"] += r.tokens
    return out


def _report_files(run_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in (run_dir / "report").iterdir()}


def test_unset_parameters_are_left_out_not_logged_as_none() -> None:
    params = flatten("", {"run": {"max_calls": None, "workers": 2, "prices": {}}, "flags": {"c": [0, 1]},
                          "roles": []}, {})
    assert params == {"run.workers": "2", "flags.c": "[0, 1]"}


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_mlflow_continues_one_run_across_a_resume_with_the_clis_full_report(tmp_path: Path, no_network: None,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason="the [mlflow] extra is not installed")
    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this flag
    scenario = tmp_path / "tracked.yaml"
    scenario.write_text(yaml.safe_dump(_scenario("mlflow")), encoding="utf-8")
    run_dir = tmp_path / "run"
    first = CliRunner().invoke(_cli(), ["run", str(scenario), "--run-dir", str(run_dir), "--quiet",
                                        "--max-calls", PART])
    assert first.exit_code == 3, first.output  # stopped by the budget, resumable
    client = MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("tracked")
    assert exp is not None
    (part,) = client.search_runs([exp.experiment_id])
    assert part.info.status == "KILLED"
    stored = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["tracker"]
    assert stored == {"kind": "mlflow", "run_id": part.info.run_id}
    done_before = {c: int(m["done"]) for c, m in _expected(run_dir).items()}
    assert 0 < sum(done_before.values()) < 6
    # a table the interrupted part had and the finished run has not must not stay beside the new report
    client.log_text(part.info.run_id, "old", "report/only_in_the_interrupted_part.csv")

    second = CliRunner().invoke(_cli(), ["run", "--resume", str(run_dir), "--quiet"])
    assert second.exit_code == 0, second.output
    (run,) = client.search_runs([exp.experiment_id])  # the same run, continued: not a second one
    assert run.info.run_id == part.info.run_id and run.info.status == "FINISHED"
    assert run.info.run_name == run_dir.name
    params = run.data.params
    assert params["pipeline"] == "generalist" and params["run.tracker"] == "mlflow"
    assert params["medpanel.run_dir"] == str(run_dir)
    assert "None" not in params.values() and "run.max_calls" not in params and "run.storage" not in params
    want = _expected(run_dir)
    assert set(want) == {"c0", "c1"} and all(m["done"] == 3 for m in want.values())
    for cond, m in want.items():
        history = client.get_metric_history(run.info.run_id, f"{cond}/done")
        # one point per finished question of that condition, its step that condition's count: no gaps
        assert sorted((h.step, h.value) for h in history) == [(n, n) for n in range(1, int(m["done"]) + 1)]
        assert run.data.metrics[f"{cond}/accuracy"] == pytest.approx(m["correct"] / m["done"])
        assert run.data.metrics[f"{cond}/calls"] == m["calls"] and run.data.metrics[f"{cond}/tokens"] == m["tokens"]
    logged = {a.path.removeprefix("report/") for a in client.list_artifacts(run.info.run_id, "report")}
    written = _report_files(run_dir)
    assert logged == set(written)  # every table the CLI wrote, and only those
    # the full report: the transitions and the ledger come from the transcripts the CLI reads
    assert {"answer_transitions.csv", "cost_ledger_per_role_and_step.csv"} <= logged
    local = client.download_artifacts(run.info.run_id, "report/report.md", str(tmp_path / "dl"))
    assert Path(local).read_text(encoding="utf-8") == written["report.md"]
    assert "10,000" in written["report.md"] or "10000" in written["report.md"]


def _wandb_records(path: Path) -> list[Any]:
    """The protobuf records of an offline run's `.wandb` file. wandb 0.31 ships no reader for it, so
    the framing (LevelDB log: 32 KiB blocks, 7-byte record headers) is undone here and each record
    is parsed by wandb's own protobuf class."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, buf = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            continue
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):  # FULL or LAST
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def _exited_records(session: Path) -> list[Any]:
    """A session's records once its exit record is written: wandb's service writes the file from its
    own process and may still be writing when `finish()` has returned."""
    deadline = time.monotonic() + 120
    while True:
        records = _wandb_records(next(session.glob("*.wandb")))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def test_wandb_resumes_the_stored_run_offline_with_per_condition_steps(tmp_path: Path, no_network: None,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="the [wandb] extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()
    part = medpanel.run(_scenario("wandb"), run_dir=tmp_path / "run", max_calls=int(PART))
    assert part.state == "stopped" and 0 < part.pairs - part.remaining < part.pairs
    run_id = json.loads((part.run_dir / "run.json").read_text(encoding="utf-8"))["tracker"]["run_id"]
    done = medpanel.resume(part.run_dir)
    assert done.complete
    assert json.loads((part.run_dir / "run.json").read_text(encoding="utf-8"))["tracker"] == {"kind": "wandb",
                                                                                             "run_id": run_id}
    sessions = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(sessions) == 2
    # One run id, resumed: each session's own run record names it. (Its folder name does too, unless
    # both sessions began within one second, when wandb adds "-1" to the second folder's name.)
    for s in sessions:
        assert {r.run.run_id for r in _exited_records(s) if r.WhichOneof("record_type") == "run"} == {run_id}, s
    records = [r for s in sessions for r in _exited_records(s)]
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item} for r in records
               if r.WhichOneof("record_type") == "history"]
    want = _expected(part.run_dir)
    for cond, m in want.items():
        steps = [h[f"{cond}/done"] for h in history if f"{cond}/done" in h]
        assert steps == list(range(1, int(m["done"]) + 1))  # its own count, across both sessions, no gap
        last = [h for h in history if f"{cond}/done" in h][-1]
        assert last[f"{cond}/accuracy"] == pytest.approx(m["correct"] / m["done"])
        assert last[f"{cond}/tokens"] == m["tokens"] and last[f"{cond}/calls"] == m["calls"]
    axes = {r.metric.glob_name: r.metric.step_metric for r in records if r.WhichOneof("record_type") == "metric"
            and r.metric.glob_name}
    assert axes == {"c0/*": "c0/done", "c1/*": "c1/done"}
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in runs[0].config.update}
    assert config["pipeline"] == "generalist" and config["run.tracker"] == "wandb"
    assert None not in config.values() and "None" not in config.values() and "run.max_calls" not in config
    arts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert arts and all(a.name == "report" for a in arts)
    assert {e.path for e in arts[-1].manifest.contents} == set(_report_files(part.run_dir))
