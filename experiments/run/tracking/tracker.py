"""`run.tracker: mlflow | wandb`: a run's config, live per-condition metrics and its report, sent to
the tracker researchers already use, through its own client library (the `[mlflow]` / `[wandb]` extras).

What is logged:
- params: the scenario as validated, flattened to dotted keys (`run.workers`, `model.backend` ...),
  plus the run directory and the git commit; keys left unset (None, empty) are left out;
- metrics, after every committed question, per condition: `<slug>/accuracy` (correct / done, invalid
  answers and error rows counted wrong, as in the report), `<slug>/done`, `<slug>/calls`,
  `<slug>/tokens`, `<slug>/cost_usd`, `<slug>/invalid`, `<slug>/errors`; the step is that
  condition's questions done, so each condition's curve has a point per question (W&B: each
  condition's metrics are plotted against its own `<slug>/done`);
- the report the caller wrote (the CLI's `report/`, or `medpanel.run`'s), handed over as its list
  of files, copied into a fresh folder and logged as the artifact `report`.

One tracker run per medpanel run, across resumes: its id is kept in run.json (`tracker`), and a
resume continues that run (MLflow: the same run id, set running again; W&B: `resume="allow"`
with the stored id) instead of opening a new one.

Where it goes is the library's own setting: `MLFLOW_TRACKING_URI` (e.g. `file:///path/mlruns`; default
`./mlruns`) and `MLFLOW_EXPERIMENT_NAME` (default the scenario name); `WANDB_MODE` (`offline` writes
under `WANDB_DIR`, default the run directory), `WANDB_PROJECT` (default `medpanel`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import load_record

TRACKERS = ("mlflow", "wandb")
PARAM_CHARS = 500  # MLflow's limit on a param value in older servers; longer values are cut


def flatten(prefix: str, value: object, out: dict[str, str]) -> dict[str, str]:
    """Dotted keys -> values as text; an unset value (None, {} or []) is left out, not logged as "None"."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif value is not None and value != {} and value != []:
        out[prefix] = str(value)[:PARAM_CHARS]
    return out


class Tracker:
    """Per-condition aggregates over the run's rows (a re-run pair replaces its old row), sent on each row."""

    def __init__(self, backend: _Backend, kind: str) -> None:
        self.backend = backend
        self.kind = kind
        self.rows: dict[tuple[str, str, str, int], Row] = {}
        self.logged: dict[str, int] = {}
        """The step each condition was last logged at (a continued run's earlier points count)."""
        self.lock = threading.Lock()
        self.state = "incomplete"
        """How the last session ended (the runner sets it); the tracker run is closed with it."""

    @property
    def record(self) -> dict[str, str]:
        """What run.json keeps, so a resume continues this tracker run."""
        return {"kind": self.kind, "run_id": self.backend.run_id}

    def seed(self, rows: list[Row]) -> None:
        with self.lock:
            for r in rows:
                self.rows[(r.condition, r.dataset, r.qid, r.repeat)] = r
            if self.backend.continued:  # the earlier sessions logged these points already
                for cond in {r.condition for r in rows}:
                    self.logged.setdefault(cond, self._done(cond))

    def _done(self, condition: str) -> int:
        return sum(1 for r in self.rows.values() if r.condition == condition)

    def metrics(self, condition: str) -> dict[str, float]:
        rows = [r for r in self.rows.values() if r.condition == condition]
        n = len(rows)
        return {f"{condition}/accuracy": sum(r.correct for r in rows) / n if n else 0.0, f"{condition}/done": n,
                f"{condition}/calls": sum(r.calls for r in rows), f"{condition}/tokens": sum(r.tokens for r in rows),
                f"{condition}/cost_usd": sum(r.cost_usd for r in rows),
                f"{condition}/invalid": sum(r.invalid for r in rows),
                f"{condition}/errors": sum(bool(r.error) for r in rows)}

    def _log(self, condition: str) -> None:
        step = self._done(condition)
        self.backend.log_metrics(self.metrics(condition), step=step)
        self.logged[condition] = step

    def row(self, row: Row) -> None:
        with self.lock:
            self.rows[(row.condition, row.dataset, row.qid, row.repeat)] = row
            self._log(row.condition)

    def report(self, files: Sequence[Path] | None) -> None:
        """Log the report the caller has just written (exactly these files, from a fresh folder, so no
        table an earlier session wrote and this one did not is sent)."""
        if not files:
            return
        with self.lock, tempfile.TemporaryDirectory(prefix="medpanel-report-") as tmp:
            folder = Path(tmp) / "report"
            folder.mkdir()
            for f in files:
                shutil.copy2(f, folder / f.name)
            self.backend.log_artifacts(folder)

    def close(self, state: str | None = None) -> None:
        """Log what no row logged (a condition whose rows all came from before), then end the tracker run."""
        with self.lock:
            for cond in sorted({r.condition for r in self.rows.values()}):
                if self.logged.get(cond) != self._done(cond):
                    self._log(cond)
            self.backend.close(state or self.state)


class _Backend:
    run_id: str
    continued: bool = False
    """The stored run was found and is being continued."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def log_artifacts(self, folder: Path) -> None:
        raise NotImplementedError

    def close(self, state: str) -> None:
        raise NotImplementedError


class _MLflow(_Backend):
    def __init__(self, name: str, run_name: str, params: dict[str, str], run_id: str | None) -> None:
        # The client with an explicit run id, not the fluent API: its active run is per thread, and
        # metrics are logged from the workers' threads.
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        stored = self._stored(run_id)
        if stored is not None:
            self.run_id, self.continued = stored, True
            self.client.update_run(stored, status="RUNNING")
            return  # its params were logged when it was created (MLflow's params cannot change)
        exp_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or name
        exp = self.client.get_experiment_by_name(exp_name)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(exp_name)
        self.run_id = self.client.create_run(exp_id, run_name=run_name, tags={"medpanel.run": run_name}).info.run_id
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def _stored(self, run_id: str | None) -> str | None:
        """The stored run id, if this tracking store still has that run (a new store starts a new run)."""
        if not run_id:
            return None
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        return run_id if run.info.lifecycle_stage == "active" else None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def log_artifacts(self, folder: Path) -> None:
        # An earlier session's report goes first, where the store can delete (file stores can), so a
        # table that session had and this one lacks does not stay beside the new report.
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        repo = get_artifact_repository(self.client.get_run(self.run_id).info.artifact_uri)
        # mlflow declares delete_artifacts without types.
        delete: Callable[[str], None] = repo.delete_artifacts
        with contextlib.suppress(Exception):
            delete("report")
        self.client.log_artifacts(self.run_id, str(folder), artifact_path="report")

    def close(self, state: str) -> None:
        status = {"complete": "FINISHED", "failed": "FAILED"}.get(state, "KILLED")
        self.client.set_terminated(self.run_id, status=status)


class _WandB(_Backend):
    def __init__(self, name: str, run_name: str, params: dict[str, str], run_dir: Path, run_id: str | None,
                 conditions: list[str]) -> None:
        import wandb

        self.wandb = wandb
        self.continued = bool(run_id)
        # wandb's terminal lines (its banner, run history, sync hints, "Detected [openai]", artifact
        # progress) would land among and after medpanel's summary: they are off while this tracker is
        # open (its own debug log under WANDB_DIR keeps them), and put back as wandb's own settings say
        # when it closes. console="off": wandb does not wrap medpanel's stdout and stderr to copy them.
        # A failure still raises, and becomes one line (open_tracker).
        quiet = wandb.Settings(silent=True, console="off")
        wandb.setup()  # wandb's first setup applies its global settings to the terminal: before ours
        wandb.termsetup(quiet, None)
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "medpanel", name=run_name, group=name,
                                  config=params, dir=os.environ.get("WANDB_DIR") or str(run_dir),
                                  reinit="create_new", id=run_id or None, resume="allow", settings=quiet)
        except BaseException:
            self._speak_again()
            raise
        self.run_id = self.run.id
        for cond in conditions:  # each condition's curve against its own questions done
            self.run.define_metric(f"{cond}/done")
            self.run.define_metric(f"{cond}/*", step_metric=f"{cond}/done")

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics)

    def log_artifacts(self, folder: Path) -> None:
        art = self.wandb.Artifact("report", type="report")
        art.add_dir(str(folder))
        self.run.log_artifact(art)

    def close(self, state: str) -> None:
        try:
            self.run.finish(exit_code=0 if state == "complete" else 1)
        finally:
            self._speak_again()

    def _speak_again(self) -> None:
        """wandb's terminal as its global settings have it (what `wandb.setup` itself applies)."""
        self.wandb.termsetup(self.wandb.setup().settings, None)


def open_tracker(kind: str | None, run_dir: Path) -> Tracker | None:
    """The run's tracker, or None; the tracker run stored in run.json is continued, a new one is stored
    there. A missing extra is a one-line `UserError` naming the fix."""
    if kind is None:
        return None
    run_json = run_dir / "run.json"
    record = load_record(run_dir) if run_json.is_file() else None
    scenario = record.scenario if record is not None else {}
    params = flatten("", scenario, {})
    params["medpanel.run_dir"] = str(run_dir)
    flatten("medpanel.commit", record.git.commit if record is not None else None, params)
    name = str(scenario.get("name") or run_dir.name)
    stored = (record.tracker if record is not None else None) or {}
    run_id = str(stored["run_id"]) if stored.get("kind") == kind and stored.get("run_id") else None
    conditions = record.slugs if record is not None else []
    try:
        backend: _Backend = _MLflow(name, run_dir.name, params, run_id) if kind == "mlflow" \
            else _WandB(name, run_dir.name, params, run_dir, run_id, conditions)
    except ImportError:
        extra = "mlflow" if kind == "mlflow" else "wandb"
        raise UserError(f"run.tracker {kind} needs its library: pip install 'medpanel[{extra}]'",
                        field="run.tracker") from None
    except Exception as exc:  # the library's own refusal (a store it will not open, a bad setting)
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        raise UserError(f"run.tracker {kind} could not start: {first}", field="run.tracker") from None
    tracker = Tracker(backend, kind)
    if record is not None and record.tracker != tracker.record:
        # The run.json as read (only the keys the file has), with the tracker run added.
        doc = record.model_dump(mode="json", exclude_unset=True) | {"tracker": tracker.record}
        Confined(run_dir).write("run.json", json.dumps(doc, indent=2))
    return tracker


@contextlib.contextmanager
def tracking(kind: str | None, run_dir: Path) -> Iterator[Tracker | None]:
    """The tracker held open across a session and the report written after it; closed with the
    session's state (`Tracker.state`), or as failed when an exception leaves the block."""
    tracker = open_tracker(kind, run_dir)
    if tracker is None:
        yield None
        return
    try:
        yield tracker
    except BaseException:
        tracker.close("failed")
        raise
    tracker.close()
