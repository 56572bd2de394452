"""The run: a directory, an Optuna GridSampler study over shards of the (condition, question) grid.

Why shards: Optuna's GridSampler re-reads the study's trials on every trial, so its cost per
trial grows with the grid (82 ms at 100 points, 277 ms at 400 on this machine). A trial here is a
shard of `shard_size` pairs, which keeps the trial count small and the runner's own cost per pair
flat. Why claims: every pair is claimed in the store before any model call, so no pair is ever
executed twice, whatever the sampler re-offers (the workers are `experiments/run/execution/worker.py`).

Resume opens a new study in the same storage whose grid is exactly the shards the store still
lacks. A fresh GridSampler study assigns grid points by trial number, so each pending shard runs
once; re-enqueueing into the old study would not work, because a GridSampler whose points were all
visited (FAILED and killed trials count) stops the study after the first re-run trial.

The runner's other jobs live beside it: planning (`plan.py`), provenance (`provenance.py`), the run
directory (`directory.py`), run state (`state.py`, `signals.py`) and execution (`worker.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from medpanel.agents.model.backends import ClientFactory, preload
from medpanel.agents.model.cache import ResponseCache
from medpanel.agents.model.embedded import EmbeddedServer, embedded_server
from medpanel.agents.model.replay import Replay
from medpanel.agents.redact import install_log_redaction, redact, redact_url
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution import batches, directory, processes, shares, signals
from medpanel.experiments.run.execution.axes_health import session_health
from medpanel.experiments.run.execution.collector import collecting_less
from medpanel.experiments.run.execution.roles import MemberRole, RunnerRole, SharedRole
from medpanel.experiments.run.execution.shared import Shared
from medpanel.experiments.run.execution.worker import Worker
from medpanel.experiments.run.scenario.axes import ModelBudget
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.runspec import updated
from medpanel.experiments.run.sources.quiet import no_widget_notice
from medpanel.experiments.run.store import confined
from medpanel.experiments.run.store.files import write_status
from medpanel.experiments.run.store.storage import Pair, is_shared, normalize_url, optuna_engine_kwargs
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.tracking.budget import Budget, RateLimits
from medpanel.experiments.run.tracking.health import EndpointHealth
from medpanel.experiments.run.tracking.state import ProgressHook, Stop, Tally
from medpanel.experiments.run.tracking.tracker import Tracker, open_tracker, tracking
from medpanel.retrieval.errors import RetrievalError, SourceConfigError

with no_widget_notice():  # optuna imports tqdm.auto: see quiet.py
    import optuna

SHARED_POLL_S = 1.0
"""Shared storage: how often a worker with nothing left checks whether others have finished."""

class Runner:
    """One run directory. `Runner.create` starts a run, `Runner.open` resumes one."""

    def __init__(self, run_dir: Path, plan: Plan, *, storage: str | None = None) -> None:
        self.run_dir = run_dir
        self.plan = plan
        self.storage_url = normalize_url(storage or plan.scenario.run.storage or f"sqlite:///{run_dir / 'study.db'}")
        self.role: RunnerRole = SharedRole() if is_shared(self.storage_url) else RunnerRole()
        """What this process is to the run: its runner, a member, a shared worker (`roles.py`)."""
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.stop = Stop()
        self.tally = Tally()
        self.client_factory: ClientFactory | None = None
        """Tests and benchmarks inject a scripted client factory here."""
        self.replay: Replay | None = None
        """`--replay RUN_DIR`: answer from that run's stored responses (agents/model/replay.py)."""
        self.timings: dict[str, float] = {}
        self.model_budgets: dict[str, ModelBudget] = {}
        self.budget = self._budget()
        self.created_with: dict[str, str] = {}
        """Package versions the run was created with (run.json)."""
        self.retry_errors = False
        """`--resume --retry-errors`: pairs with error rows run again; each new result replaces its error row."""
        self.health = EndpointHealth(plan.model_spec)
        self.tracker: Tracker | None = None
        """Held open by `tracking()` across sessions' end and the report; else each `run()` opens its own."""

    @property
    def shared(self) -> bool:
        """On shared storage (PostgreSQL): `medpanel worker`s may join from any machine."""
        return self.role.shared

    @property
    def member(self) -> processes.MemberSpec | None:
        """A child process's part from its runner (`run.processes`), or None."""
        return self.role.member

    @property
    def n_processes(self) -> int:  # `run.processes`; shared storage has `medpanel worker`s instead
        return self.role.processes(self.plan.scenario.run)

    def _budget(self) -> Budget:
        run, n = self.plan.scenario.run, self.n_processes
        prices = {**self.plan.axes.prices(), **run.prices}  # `models:` blocks' own prices, by model name
        self.model_budgets = self.plan.axes.budgets(self.stop, prices)
        shares.share_model_rates(self.model_budgets.values(), n)  # each process its share (`shares.py`)
        return Budget(stop=self.stop, max_calls=run.max_calls, max_tokens=run.max_tokens,
                      max_cost_usd=run.max_cost_usd, max_wall_s=run.max_wall_s, prices=prices,
                      # Always present: with no rpm/tpm set it still reads the endpoint's headers and 429s.
                      limiter=RateLimits(shares.rate(run.requests_per_minute, n), shares.rate(run.tokens_per_minute, n),
                                         max_wait_s=run.max_retry_wait_s, on_long_wait=self._long_wait,
                                         tpm_setting="run.tokens_per_minute (--tpm)"
                                                     + (f", this process's 1/{n} share" if n > 1 else "")))

    def _long_wait(self, seconds: float) -> None:
        """An endpoint asked for a wait longer than `run.max_retry_wait_s`: stop now, resumably."""
        model = self.plan.scenario.model
        where = redact_url(model.base_url) if model.base_url else f"the {model.backend} endpoint"
        cap = self.plan.scenario.run.max_retry_wait_s
        self.stop.abort(f"{where} asked to wait {seconds:,.0f} s before the next request, longer than "
                        f"run.max_retry_wait_s ({cap:g} s); resume later, or raise run.max_retry_wait_s")

    def override(self, **values: object) -> None:
        """Change run settings for this session (a higher budget on resume, more workers)."""
        values = {k: v for k, v in values.items() if v is not None}
        if values:
            run = updated(self.plan.scenario.run, values, block="run")  # the YAML's bounds, naming the option
            self.plan.scenario = self.plan.scenario.model_copy(update={"run": run})
            self.budget = self._budget()

    # -- creation and resume -------------------------------------------------------------------

    @classmethod
    def create(cls, plan: Plan, *, runs_dir: Path | None = None, run_dir: Path | None = None,
               scenario_file: str | None = None) -> Runner:
        directory.check_credentials(plan)  # before anything is created: a run that cannot call its model is no run
        run_dir = directory.new_run_dir(plan, runs_dir=runs_dir, run_dir=run_dir)
        runner = cls(run_dir, plan)
        questions = directory.write_questions(run_dir, plan)
        meta = directory.run_record(plan, storage_url=runner.storage_url, scenario_file=scenario_file)
        store = Store(runner.storage_url, run_dir)
        store.put_meta("questions", questions)
        store.put_meta("run_json", json.dumps(meta))
        store.close()
        runner.created_with = meta["versions"]
        # Optuna's schema is created (and checked) with the run, so starting a session does not
        # pay for it; see `_optuna_storage`.
        runner._optuna_storage().engine.dispose()
        confined.Confined(run_dir).write("run.json", json.dumps(meta, indent=2))  # last: the run exists from now on
        return runner

    @classmethod
    def join(cls, url: str, run_dir: Path | None = None) -> Runner:
        """A worker for a run whose storage is shared (PostgreSQL), from any machine."""
        runner = cls.open(directory.join_files(url, run_dir))
        runner.storage_url = normalize_url(url)
        runner.role = SharedRole()
        return runner

    @classmethod
    def open(cls, run_dir: Path, member: processes.MemberSpec | None = None) -> Runner:
        plan, record = directory.read_plan(run_dir)
        directory.check_credentials(plan)
        runner = cls(run_dir, plan)
        if member is not None:
            runner.role, runner.owner = MemberRole(member), member.owner
        runner.role.check_open(run_dir, runner.storage_url)
        store = Store(runner.storage_url, run_dir)
        try:
            directory.check_parts(run_dir, record, store)  # run.json and questions of another run: refused
        finally:
            store.close()
        runner.created_with = dict(record.versions)
        return runner

    # -- the study -----------------------------------------------------------------------------

    def _optuna_storage(self) -> optuna.storages.RDBStorage:
        # Optuna checks the schema against its migrations on every open, loading all of alembic's
        # revision scripts (~0.3 s). The check guards against a schema from another Optuna version;
        # a run reopened by the version that created it skips it.
        same = self.created_with.get("optuna") == optuna.__version__
        return optuna.storages.RDBStorage(self.storage_url, engine_kwargs=optuna_engine_kwargs(self.storage_url),
                                          skip_compatibility_check=same)

    def prepare(self) -> None:
        """Resolve the pipeline (once: the workers reuse it) and let it open what every worker will
        share (a corpus index) before they start."""
        resolved = self.plan.resolved
        try:
            resolved.pipeline.prepare(list(resolved.plans.values()), resolved.settings)
        except RetrievalError as exc:
            field = exc.field if isinstance(exc, SourceConfigError) else "settings.corpus"
            raise UserError(str(exc), field=field) from None

    def pending_shards(self, done: set[Pair]) -> list[int]:
        return [i for i, shard in enumerate(self.plan.shards()) if any(p not in done for p in shard)]

    # -- a session -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def tracking(self) -> Iterator[Tracker | None]:
        """Keep the run's tracker open across `run()` and the report written after it (the CLI's,
        `medpanel.run`'s), so the report logged is the one the caller wrote: `tracker.report(files)`."""
        with tracking(self.plan.scenario.run.tracker, self.run_dir) as tracker:
            self.tracker = tracker
            try:
                yield tracker
            finally:
                self.tracker = None

    def run(self, *, progress: ProgressHook | None = None, install_signals: bool = True) -> dict[str, Any]:
        """Work through every missing pair. Returns a status dict (also written to status.json).

        The run's own storage failing (disk full, a read-only folder) stops the run like a budget:
        the reason names the path and the cause, what was committed stays, and a resume goes on.
        """
        if self.client_factory is not None and self.n_processes > 1:
            # The child processes build their own clients from the scenario: a factory given in this
            # process (a scripted model in a notebook) would answer only this process's share.
            raise UserError(f"is {self.n_processes} with a client_factory, which only this process has. "
                            "Set run.processes: 1 (processes=1) to use it", field="run.processes")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        install_log_redaction()  # an endpoint's echoed key must not reach a log either
        store = Store(self.storage_url, self.run_dir)
        started = time.time()
        shared = Shared(plan=self.plan, store=store, owner=self.owner, stop=self.stop, budget=self.budget,
                        health=self.health, tally=self.tally, timings=self.timings, started=started,
                        progress=progress, client_factory=self.client_factory, retry_errors=self.retry_errors,
                        model_budgets=self.model_budgets, replay=self.replay)
        if self.replay is not None and self.replay.strict:
            self.replay.on_strict_miss = self.stop.set
        total = len(self.plan.pairs)
        held = self.tracker is not None or not self.role.writes_status  # a member's runner's tracker logs the run
        tracker = self.tracker if held else open_tracker(self.plan.scenario.run.tracker, self.run_dir)
        if tracker is not None:
            tracker.seed(store.rows())
            shared.on_row = tracker.row
        with self.role.lock(self.run_dir, self.owner):
            with contextlib.suppress(OSError):  # also reserves the file's space (see write_status)
                if self.role.writes_status:
                    write_status(self.run_dir, {"state": "running", "pid": os.getpid(),
                                               "updated": datetime.now(timezone.utc).isoformat()})
            try:
                self._session(shared, install_signals)
            except Exception as exc:
                cause = store.resource_failure(exc)
                if cause is None:
                    raise
                self.stop.set(cause)
            shared.settle_held()
            done = store.done()
            remaining = total - len(done)
            if self.retry_errors:
                # Error rows this session was asked to re-run but did not reach are still to do.
                remaining += len((shared.error_pairs - shared.retried) & done)
            store.sync_transcripts()
            status: dict[str, Any] = {
                "state": "complete" if remaining == 0 else "stopped" if self.stop.is_set else "incomplete",
                "reason": redact(self.stop.reason) if self.stop.reason else None,
                "remaining": remaining, "errors": store.error_count(),
                "session_wall_s": round(time.time() - started, 3),
                "processes": self.n_processes,
                "updated": datetime.now(timezone.utc).isoformat(),
            }
            try:
                if self.role.writes_status:
                    write_status(self.run_dir, status)
            except OSError as exc:
                status["status_error"] = store.resource_failure(exc) or f"cannot write {exc.filename}: {exc}"
            if tracker is not None:
                tracker.state = status["state"]
                if not held:
                    tracker.close()
        store.close()
        return status

    def _prior(self, shared: Shared) -> None:
        """Earlier sessions' pairs in the tally and spend in the budgets; of what is left, this process's share."""
        run, role, retry = self.plan.scenario.run, self.role, self.retry_errors
        rows = shared.store.rows()
        shared.error_pairs = {(r.condition, r.dataset, r.qid, r.repeat) for r in rows if r.error} if retry else set()
        for row in rows:
            # An error row to be re-run is not done. A member's tally is its session's (its runner sums them).
            if not (retry and row.error) and role.counts_prior:
                self.tally.add(row)
        # Spend of earlier sessions counts against the budgets, error rows' included.
        self.budget.add_prior(sum(r.calls for r in rows), sum(r.tokens for r in rows), sum(r.cost_usd for r in rows))
        for label, budget in self.model_budgets.items():  # a model's own: its conditions' rows (routed calls not)
            own = [r for r in rows if self.plan.axes.cond_model.get(r.condition) == label]
            budget.add_prior(sum(r.calls for r in own), sum(r.tokens for r in own), sum(r.cost_usd for r in own))
        if self.n_processes > 1:
            prior_errors = 0 if retry else sum(1 for r in rows if r.error)
            errors = shares.take(self.budget, self.model_budgets.values(), run.max_errors, prior_errors,
                                 self.n_processes, role.index, counts_prior=role.counts_prior)
            self.plan.scenario = self.plan.scenario.model_copy(update={"run": run.model_copy(
                update={"max_errors": errors})})

    def _session(self, shared: Shared, install_signals: bool) -> None:
        store, run, role = shared.store, self.plan.scenario.run, self.role
        role.release_before(store, self.owner, run)
        settings = processes.session_settings(run)  # before the shares: a member takes its own
        self._prior(shared)
        done = store.done(answered_only=self.retry_errors)
        pending = self.pending_shards(done)
        shared.taken = set(done)
        shared.pending = [p for p in self.plan.pairs if p not in done]
        server: EmbeddedServer | None = None
        storage: optuna.storages.RDBStorage | None = None
        group = processes.Group(self.run_dir, self.stop, store, grace_s=run.interrupt_grace_s,
                                backstop_s=signals.BACKSTOP_S) if role.starts_members(self.n_processes) else None
        restore = signals.install(self.stop, run.interrupt_grace_s, forward=group.forward if group else None,
                                  backstop=lambda: signals.end_process(self.run_dir, self.stop)) \
            if install_signals else None
        try:
            if not pending:
                return
            if group is not None:
                group.spawn(self.n_processes - 1)  # their imports overlap this process's start-up
            own = confined.Confined(self.run_dir)  # diskcache and the server open their files: checked first
            if any(m.cache != "off" for m in [self.plan.scenario.model, *self.plan.axes.models.values()]):
                shared.cache = ResponseCache(own.folder("cache", in_place=True))
            self.prepare()
            spec = next((m for m in [self.plan.scenario.model, *self.plan.axes.models.values()]
                         if m.backend == "local"), self.plan.scenario.model)
            if role.starts_server() and spec.backend == "local" and self.client_factory is None:
                server = embedded_server(spec, log_path=own.check_file("local_server.log", in_place=True))
            shared.base_url = role.base_url(server.start() if server is not None else None)
            self.health = shared.health = session_health(self.plan, shared.base_url)  # one watch per model
            preload(self.plan.model_spec)
            grid = role.grid(len(self.plan.shards()), pending)
            storage = self._optuna_storage()
            study = role.study(storage, grid)
            if group is not None:
                group.send(processes.member_specs(self.n_processes, self.owner, study.study_name, grid, shared.base_url,
                                                   settings, retry_errors=self.retry_errors, replay=self.replay))
                shared.progress = group.progress(shared.progress, self.tally, shared.total)
            self.timings["startup_s"] = time.time() - shared.started
            with role.watching(), collecting_less(), batches.session(self.run_dir, self.plan):
                self._work(shared, study, role.trials(grid, pending))
        except BaseException:
            if group is not None:
                group.drain()  # the runner failed: its children stop too
            raise
        finally:
            if group is not None:
                group.wait()  # before the server stops: the children use it
            if server is not None:
                server.stop()
            if shared.cache is not None:
                shared.cache.close()
            if storage is not None:
                # Its connections closed now, not by the interpreter's teardown (which the CLI
                # skips): the last one to close folds SQLite's WAL back and removes it.
                storage.engine.dispose()
            if restore is not None:
                restore()

    def _work(self, shared: Shared, study: optuna.Study, n_trials: int) -> None:
        store, run = shared.store, self.plan.scenario.run
        shards = self.plan.shards()

        def objective(trial: optuna.Trial) -> float:
            idx = trial.suggest_int("shard", 0, len(shards) - 1)
            try:
                n, k = asyncio.run(Worker(shared).work(shards[idx]))
            except Exception as exc:
                cause = store.resource_failure(exc)
                if cause is None:
                    raise
                # Stop here, not as a failed trial: Optuna would log a traceback per worker.
                self.stop.set(cause)
                n, k = 0, 0
            trial.set_user_attr("pairs", n)
            if self.stop.is_set or shared.all_taken():
                # Nothing left for this process: asking Optuna for the grid's remaining
                # shards (each a trial to create, run empty and close) would only delay the end.
                trial.study.stop()
            return k / n if n else 0.0

        signals.in_a_thread(lambda: study.optimize(objective, n_trials=n_trials, n_jobs=run.workers,
                                                   catch=(Exception,), gc_after_trial=False))
        if self.role.stays_until_done(self.n_processes):
            # Others may hold the last pairs (the role says what frees a dead process's claims meanwhile).
            processes.stay_until_done(shared, lambda: self._missing(store), self.role.stale(store, self.owner, run),
                                      SHARED_POLL_S)

    def _missing(self, store: Store) -> list[Pair]:
        done = store.done(answered_only=self.retry_errors)
        return [p for p in self.plan.pairs if p not in done]
