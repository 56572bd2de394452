"""`run.tracker: mlflow | wandb`: a run's config, live per-condition metrics and its report, sent to
the tracker researchers already use, through its own client library (the `[mlflow]` / `[wandb]` extras).

What is logged:
- params: the scenario as validated, flattened to dotted keys (`run.workers`, `model.backend` ...),
  plus the run directory and the git commit;
- metrics, after every committed question, per condition: `<slug>/accuracy` (correct / done, invalid
  answers and error rows counted wrong, as in the report), `<slug>/done`, `<slug>/calls`,
  `<slug>/tokens`, `<slug>/cost_usd`, `<slug>/invalid`, `<slug>/errors`; the step is the number of
  questions finished in the run;
- at the end of the session: the report tables are written to `report/` and that folder is logged
  as an artifact (`report/`).

Where it goes is the library's own setting: `MLFLOW_TRACKING_URI` (e.g. `file:///path/mlruns`; default
`./mlruns`) and `MLFLOW_EXPERIMENT_NAME` (default the scenario name); `WANDB_MODE` (`offline` writes
under `WANDB_DIR`, default the run directory), `WANDB_PROJECT` (default `medpanel`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from medpanel.experiments.analysis.report import build_tables, write_report
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store import Row

TRACKERS = ("mlflow", "wandb")
PARAM_CHARS = 500  # MLflow's limit on a param value in older servers; longer values are cut


def flatten(prefix: str, value: Any, out: dict[str, str]) -> dict[str, str]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = str(value)[:PARAM_CHARS]
    return out


class Tracker:
    """Per-condition aggregates over the run's rows (a re-run pair replaces its old row), sent on each row."""

    def __init__(self, backend: _Backend) -> None:
        self.backend = backend
        self.rows: dict[tuple[str, str, str, int], Row] = {}
        self.lock = threading.Lock()

    def seed(self, rows: list[Row]) -> None:
        with self.lock:
            for r in rows:
                self.rows[(r.condition, r.dataset, r.qid, r.repeat)] = r

    def metrics(self, condition: str) -> dict[str, float]:
        rows = [r for r in self.rows.values() if r.condition == condition]
        n = len(rows)
        return {f"{condition}/accuracy": sum(r.correct for r in rows) / n if n else 0.0, f"{condition}/done": n,
                f"{condition}/calls": sum(r.calls for r in rows), f"{condition}/tokens": sum(r.tokens for r in rows),
                f"{condition}/cost_usd": sum(r.cost_usd for r in rows),
                f"{condition}/invalid": sum(r.invalid for r in rows),
                f"{condition}/errors": sum(bool(r.error) for r in rows)}

    def row(self, row: Row) -> None:
        with self.lock:
            self.rows[(row.condition, row.dataset, row.qid, row.repeat)] = row
            self.backend.log_metrics(self.metrics(row.condition), step=len(self.rows))

    def finish(self, run_dir: Path, meta: dict[str, Any], state: str) -> None:
        with self.lock:
            rows = list(self.rows.values())
            for cond in sorted({r.condition for r in rows}):
                self.backend.log_metrics(self.metrics(cond), step=len(rows))
            if rows:
                write_report(run_dir, build_tables(rows, meta, n_boot=1000))
                self.backend.log_artifacts(run_dir / "report")
            self.backend.close(state)


class _Backend:
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def log_artifacts(self, folder: Path) -> None:
        raise NotImplementedError

    def close(self, state: str) -> None:
        raise NotImplementedError


class _MLflow(_Backend):
    def __init__(self, name: str, run_name: str, params: dict[str, str]) -> None:
        # The client with an explicit run id, not the fluent API: its active run is per thread, and
        # metrics are logged from the workers' threads.
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        exp_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or name
        exp = self.client.get_experiment_by_name(exp_name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(exp_name)
        self.run_id = self.client.create_run(exp_id, run_name=run_name, tags={"medpanel.run": run_name}).info.run_id
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def log_artifacts(self, folder: Path) -> None:
        self.client.log_artifacts(self.run_id, str(folder), artifact_path="report")

    def close(self, state: str) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if state == "complete" else "KILLED")


class _WandB(_Backend):
    def __init__(self, name: str, run_name: str, params: dict[str, str], run_dir: Path) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "medpanel", name=run_name, group=name,
                              config=params, dir=os.environ.get("WANDB_DIR") or str(run_dir), reinit="create_new")

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({**metrics, "questions_done": step})

    def log_artifacts(self, folder: Path) -> None:
        art = self.wandb.Artifact("report", type="report")
        art.add_dir(str(folder))
        self.run.log_artifact(art)

    def close(self, state: str) -> None:
        self.run.finish(exit_code=0 if state == "complete" else 1)


def open_tracker(kind: str | None, run_dir: Path, meta: dict[str, Any]) -> Tracker | None:
    """The run's tracker, or None; a missing extra is a one-line `UserError` naming the fix."""
    if kind is None:
        return None
    scenario = meta.get("scenario") or {}
    params = flatten("", scenario, {})
    params["medpanel.run_dir"] = str(run_dir)
    params["medpanel.commit"] = str((meta.get("git") or {}).get("commit"))
    name = str(scenario.get("name") or run_dir.name)
    try:
        backend: _Backend = _MLflow(name, run_dir.name, params) if kind == "mlflow" \
            else _WandB(name, run_dir.name, params, run_dir)
    except ImportError:
        extra = "mlflow" if kind == "mlflow" else "wandb"
        raise UserError(f"run.tracker {kind} needs its library: pip install 'medpanel[{extra}]'",
                        field="run.tracker") from None
    except Exception as exc:  # the library's own refusal (a store it will not open, a bad setting)
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        raise UserError(f"run.tracker {kind} could not start: {first}", field="run.tracker") from None
    return Tracker(backend)
