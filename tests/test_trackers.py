"""`run.tracker: mlflow | wandb`: config as params, live per-condition metrics, the report as an artifact.

MLflow writes to a local file store (`file:` URI); W&B runs in offline mode. A socket guard refuses
every connection that is not loopback or a Unix socket, so neither can reach the network.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.experiments.run.plan import Plan
from medpanel.experiments.run.runner import Runner
from medpanel.experiments.run.scenario import Scenario

from .inspect_fixtures import GRID_QUESTIONS, run_rows


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if self.family == socket.AF_UNIX or (isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1",
                                                                                                 "localhost")):
            return real(self, address)
        raise AssertionError(f"network access to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", guarded)


def _run(base: Path, tracker: str) -> Path:
    scenario = Scenario(name="tracked", pipeline="generalist", flags={"c": [0, 1]}, model={"backend": "scripted"},
                        run={"workers": 1, "tracker": tracker})
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=GRID_QUESTIONS, repeats=1,
                shard_size=2)
    runner = Runner.create(plan, run_dir=base / "tracked")
    runner.client_factory = lambda spec: ScriptedChatCompletionClient()
    status = runner.run(install_signals=False)
    assert status["state"] == "complete", status
    return runner.run_dir


def _expected(run_dir: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in run_rows(run_dir):
        m = out.setdefault(r.condition, {"correct": 0, "done": 0, "calls": 0, "tokens": 0})
        m["correct"] += r.correct
        m["done"] += 1
        m["calls"] += r.calls
        m["tokens"] += r.tokens
    return out


def test_mlflow_file_store_gets_params_live_metrics_and_the_report(tmp_path: Path, no_network: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason="the [mlflow] extra is not installed")
    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this flag
    run_dir = _run(tmp_path, "mlflow")
    client = MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("tracked")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    assert run.data.params["pipeline"] == "generalist" and run.data.params["run.tracker"] == "mlflow"
    assert run.data.params["medpanel.run_dir"] == str(run_dir)
    want = _expected(run_dir)
    assert set(want) == {"c0", "c1"}
    for cond, m in want.items():
        history = client.get_metric_history(run.info.run_id, f"{cond}/done")
        # one point per finished question of that condition (live), and the final one
        assert [h.value for h in history][:-1] == list(range(1, int(m["done"]) + 1))
        assert run.data.metrics[f"{cond}/accuracy"] == pytest.approx(m["correct"] / m["done"])
        assert run.data.metrics[f"{cond}/calls"] == m["calls"] and run.data.metrics[f"{cond}/tokens"] == m["tokens"]
    names = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert "report/report.md" in names and "report/accuracy_per_condition_x_dataset.csv" in names


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


def test_wandb_offline_gets_config_metrics_and_the_report(tmp_path: Path, no_network: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="the [wandb] extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wb").mkdir()
    run_dir = _run(tmp_path, "wandb")
    (log_file,) = list((tmp_path / "wb" / "wandb").glob("offline-run-*/*.wandb"))
    records = _wandb_records(log_file)
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item} for r in records
               if r.WhichOneof("record_type") == "history"]
    want = _expected(run_dir)
    n = sum(int(m["done"]) for m in want.values())
    assert [h["questions_done"] for h in history][:n] == list(range(1, n + 1))  # live: one step per question
    last: dict[str, Any] = {}
    for h in history:
        last.update(h)
    for cond, m in want.items():
        assert last[f"{cond}/accuracy"] == pytest.approx(m["correct"] / m["done"])
        assert last[f"{cond}/done"] == m["done"] and last[f"{cond}/tokens"] == m["tokens"]
        assert last[f"{cond}/calls"] == m["calls"]
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in run.config.update}
    assert config["pipeline"] == "generalist" and config["run.tracker"] == "wandb"
    (art,) = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert art.name == "report" and "report.md" in {e.path for e in art.manifest.contents}
