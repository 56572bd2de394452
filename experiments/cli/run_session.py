"""What `medpanel validate`, `run` and `worker` do, once `cli/run.py` has parsed the options and
(for `run`) started the child processes of `run.processes`: imported only then, so those
children's imports overlap this module's (the runner, Optuna, AutoGen). The report
(`cli.output`: the analysis, scipy) is imported in a thread while the run works, as only the
summary at its end needs it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.text import Text

from medpanel.agents.model.replay import Replay
from medpanel.experiments.cli.console import console
from medpanel.experiments.cli.progress import make_progress, progress_hook
from medpanel.experiments.errors import UserError, error_line
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.runspec import RunSpec, session_overrides, updated
from medpanel.experiments.run.scenario.scenario import DatasetSpec, check_cost_budget, load_scenario
from medpanel.experiments.run.store.storage import is_shared
from medpanel.experiments.run.tracking.state import Tally
from medpanel.inputs import one_line

REPORT_MODULE = "medpanel.experiments.cli.output"
SUMMARY_MODULES = ("medpanel.experiments.analysis.run_summary", "medpanel.experiments.analysis.study",
                   "medpanel.experiments.analysis.report", "scipy.stats")
"""What `output.print_summary` and the tracker's report import when they run (the analysis and its
statistics, seconds): imported meanwhile with `REPORT_MODULE`, not after the run's last question.
SciPy's statistics are imported by `analysis.stats` when a bootstrap or an exact test first runs
(so that `medpanel report` loads them only then); a run's summary runs them, so they are here."""
T = TypeVar("T")
"""What a progress hook returns: its wrapper returns the same."""


def validate(scenario: Path, limit: int | None, set_: list[str] | None) -> None:
    """`medpanel validate`: the scenario's conditions and question count."""
    sc = load_scenario(scenario, set_)
    plan = make_plan(sc, base_dir=scenario.parent, limit=limit, file=str(scenario))
    # Text from the file, shown as written: no markup read in it, its terminal controls escaped.
    model = sc.model.backend + (f"/{sc.model.model_name}" if sc.model.model_name else "")
    console.print(Text.assemble((one_line(sc.name), "bold"), one_line(f": pipeline {sc.pipeline}, model {model}")))
    if sc.models:  # the axis: which label is which model, and where routed roles go
        console.print(Text(one_line("models: " + ", ".join(f"{m.label} = {m.backend}/{m.model_name}" for m in sc.models)
                                    + "".join(f"; {role} -> {r.model}" for role, r in sc.roles.items()))))
    console.print(f"conditions ({len(plan.conditions)}): {', '.join(c.slug for c in plan.conditions)}")
    by_ds: dict[str, int] = {}
    for q in plan.questions:
        by_ds[q.dataset] = by_ds.get(q.dataset, 0) + 1
    console.print(Text(one_line(f"questions ({len(plan.questions)}): "
                                + ", ".join(f"{k} {v}" for k, v in by_ds.items()))))
    console.print(f"pairs: {len(plan.pairs)} (x{plan.repeats} repeats), shard size {plan.shard_size}")
    if plan.scenario.references is not None:  # read and matched to the questions by make_plan
        refs = plan.scenario.references
        names = ", ".join(r.name for r in refs.runs)
        console.print(Text(one_line(f"references ({len(refs.runs)}, not run): {names} from {refs.file}")))


def run(scenario: Path | None, resume: Path | None, limit: int | None, workers: int | None, processes: int | None,
        run_dir: Path | None, repeat: int | None, quiet: bool, max_calls: int | None, max_tokens: int | None,
        max_cost_usd: float | None, max_errors: int | None, max_wall_s: float | None, rpm: float | None,
        tpm: float | None, storage: str | None, set_: list[str] | None, retry_errors: bool, replay: Path | None,
        replay_strict: bool) -> None:
    """`medpanel run` once its children are started: a new run or a resume, to its summary."""
    session = session_overrides(workers=workers, processes=processes, max_calls=max_calls, max_tokens=max_tokens,
                                max_cost_usd=max_cost_usd, max_errors=max_errors, max_wall_s=max_wall_s,
                                requests_per_minute=rpm, tokens_per_minute=tpm)
    # Every override meets the bounds of the scenario key it replaces before anything is read or made.
    updated(RunSpec(), {**session, "repeats": repeat, "storage": storage}, block="run")
    updated(DatasetSpec(), {"limit": limit}, block="dataset")
    if retry_errors and resume is None:
        raise UserError("--retry-errors re-runs the error rows of an existing run: use it with --resume RUN_DIR",
                        field="--retry-errors")
    if resume is not None:
        for option, value in (("--limit", limit), ("--repeat", repeat), ("--storage", storage),
                              ("--run-dir", run_dir), ("--set", set_)):
            if value:
                raise UserError(f"{option} cannot change a run that exists (its questions and grid are fixed). "
                                "Start a new run with it instead", field=option)
        runner = Runner.open(resume)
        runner.retry_errors = retry_errors
    else:
        assert scenario is not None
        sc = load_scenario(scenario, set_)
        # run.json records the storage and the process count it was started with.
        sc = sc.model_copy(update={"run": updated(sc.run, {"storage": storage, "processes": processes}, block="run")})
        plan = make_plan(sc, base_dir=scenario.parent, limit=limit, repeats=repeat, workers=workers,
                         file=str(scenario))
        runner = Runner.create(plan, run_dir=run_dir, scenario_file=str(scenario))
    runner.override(**session)
    runner.replay = open_replay(replay, replay_strict)
    check_cost_budget(runner.plan.scenario.run, field="--max-cost-usd" if max_cost_usd else "run.max_cost_usd")
    total = len(runner.plan.pairs)
    console.print(f"run directory: {runner.run_dir}")
    console.print(f"{len(runner.plan.conditions)} conditions x {len(runner.plan.questions)} questions"
                  f"{f' x {runner.plan.repeats} repeats' if runner.plan.repeats > 1 else ''} = {total} pairs, "
                  f"{_processes(runner.plan.scenario.run.processes)}{runner.plan.scenario.run.workers} workers x "
                  f"{runner.plan.scenario.run.questions_per_worker} questions in flight, "
                  f"model {runner.plan.scenario.model.backend}")
    report = _Meanwhile(REPORT_MODULE, SUMMARY_MODULES)
    with runner.tracking() as tracker:  # run.tracker: it logs the full report written below
        with make_progress(console, quiet=quiet) as progress:
            # The tokens-per-minute limit, once the run has one.
            tpm_limit = runner.plan.scenario.run.tokens_per_minute
            hook = progress_hook(progress, total, priced=bool(runner.plan.scenario.run.prices), tpm_limit=tpm_limit)
            hook(runner.tally, total)
            status = runner.run(progress=report.started_by(hook))
        output = report.module()
        output.print_summary(runner.run_dir)
        if tracker is not None:
            tracker.report(output.write_full_report(runner.run_dir))
    if runner.replay is not None:
        console.print(f"replay: {runner.replay.hits} requests answered from {replay}, {runner.replay.misses} "
                      f"miss(es){' sent to the model' if runner.replay.misses and not replay_strict else ''}",
                      markup=False, highlight=False)
    if status.get("status_error"):
        error_line(str(status["status_error"]))
    if status["state"] != "complete":
        reason = f"{status['reason']}. " if status["reason"] else ""
        console.print(f"Run {status['state']}: {reason}{status['remaining']} pairs left. "
                      f"Resume with: medpanel run --resume {runner.run_dir}", style="yellow", markup=False,
                      soft_wrap=True)
        raise typer.Exit(3)
    console.print(f"Done. One debate: medpanel show {runner.run_dir} <QID>", markup=False, highlight=False,
                  soft_wrap=True)


class _Meanwhile:
    """A module imported in a thread while the run works: from its first committed question (by then
    the runner has started, and every process has its part), so the import delays none of it."""

    def __init__(self, name: str, also: tuple[str, ...] = ()) -> None:
        self.name = name
        self.also = also
        """Modules imported after it in the same thread (what its functions import when called)."""
        self.thread: threading.Thread | None = None
        self.loaded: object = None
        self.error: BaseException | None = None

    def _load(self) -> None:
        try:
            self.loaded = importlib.import_module(self.name)
            for name in self.also:
                importlib.import_module(name)
        except BaseException as exc:  # raised where the module is wanted
            self.error = exc

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._load, name="medpanel-import", daemon=True)
            self.thread.start()

    def started_by(self, hook: Callable[..., T]) -> Callable[..., T]:
        """`hook` (a progress hook), starting the import at its first call."""
        def first(*args: object) -> T:
            self.start()
            return hook(*args)
        return first

    def module(self) -> Any:
        """The module: imported now if the run committed nothing, else once the thread has."""
        if self.thread is None:
            return importlib.import_module(self.name)
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.loaded


def _processes(n: int) -> str:
    return f"{n} processes x " if n > 1 else ""


def open_replay(source: Path | None, strict: bool) -> Replay | None:
    """The source run's stored responses, checked before anything runs."""
    if source is None:
        if strict:
            raise UserError("--replay-strict needs --replay RUN_DIR", field="--replay-strict")
        return None
    if not (source / "run.json").is_file():
        raise UserError(f"{source} is not a run directory (no run.json); give the run whose answers to replay",
                        field="--replay")
    if not (source / "cache").is_dir():
        raise UserError(f"{source} kept no stored responses ({source / 'cache'} is missing: it ran with "
                        "model.cache: off); replay needs a run made with the response cache on", field="--replay")
    return Replay(source, strict=strict)


def worker(target: str, workers: int | None, run_dir: Path | None, quiet: bool, rpm: float | None,
           tpm: float | None) -> None:
    """`medpanel worker`: join a run whose storage is shared."""
    # Limits hold per process: N workers of one key each take a share (docs/operations.md, "Rate limits").
    limits = {"workers": workers, "requests_per_minute": rpm, "tokens_per_minute": tpm}
    updated(RunSpec(), limits, block="run")  # before connecting anywhere
    if "://" in target:
        if not is_shared(target):
            raise UserError("a worker needs shared storage (postgresql://...); for SQLite runs use "
                            "medpanel run --resume RUN_DIR", field="RUN_DIR_OR_URL")
        runner = Runner.join(target, run_dir)
    else:
        runner = Runner.open(Path(target))
        if not runner.shared:
            raise UserError(f"{target} keeps its study in SQLite, which one machine owns. Resume it with "
                            f"medpanel run --resume {target} (--processes N uses every core of this machine), "
                            "or start runs with run.storage: postgresql://...",
                            field="RUN_DIR_OR_URL")
    runner.override(**limits)
    console.print(f"worker {runner.owner} joining {runner.plan.scenario.name} ({len(runner.plan.pairs)} pairs)")
    status = runner.run(progress=None if quiet else _print_progress, install_signals=True)
    console.print(f"worker done: run {status['state']}, {status['remaining']} pairs left")


def _print_progress(t: Tally, total: int) -> None:
    if t.done % 10 == 0 or t.done == total:
        console.print(f"{t.done}/{total} done, {t.errors} errors, {t.calls} calls")
