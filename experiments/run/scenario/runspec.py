"""The scenario's `run:` block (`RunSpec`), and the one reading of how many processes a run uses.

Its own module, light to import (pydantic and prices; not the data sources, the model client or,
unless a `storage:` URL is given, SQLAlchemy): `medpanel run` resolves this block first, the
scenario's with `--set` and `--processes` applied (or the run record's on resume), and starts the
child processes of `run.processes` from it before the runner's seconds of imports
(`execution/children.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medpanel.experiments.errors import UserError, read_json
from medpanel.experiments.run.scenario.yamlfile import read_scenario
from medpanel.experiments.run.tracking.prices import Price

MAX_PROCESSES = 64
"""The most processes one run may use on one machine (`run.processes`, `--processes`): each is a
Python interpreter with the runner imported (about 150 MB). More cores than this are for
`medpanel worker` on shared storage (docs/operations.md)."""


def _storage() -> ModuleType:
    # Late for start-up: the storage module imports SQLAlchemy (half a second), which reading the
    # count of processes before the children start does not need unless `storage:` is set.
    from medpanel.experiments.run.store import storage

    return storage


# The run options of `medpanel run`/`worker` and the scenario keys they override: an override is
# validated by the same model as the key, and its error names the option the user typed.
SESSION_OPTIONS = {"workers": "--workers", "max_calls": "--max-calls", "max_tokens": "--max-tokens",
                   "max_cost_usd": "--max-cost-usd", "max_errors": "--max-errors", "max_wall_s": "--max-wall-s",
                   "requests_per_minute": "--rpm", "tokens_per_minute": "--tpm", "processes": "--processes"}
"""The `run:` keys a session may override, even on resume (`medpanel run --resume RUN_DIR --workers 8`),
and their options. The one list: the CLI builds its overrides from it (`session_overrides`) and a
runner hands exactly these to its child processes."""
CLI_OPTIONS = {**SESSION_OPTIONS, "repeats": "--repeat", "storage": "--storage", "limit": "--limit"}
"""Every run option: the session's, and those only a new run takes (they fix its grid and storage)."""


_M = TypeVar("_M", bound=BaseModel)


class RunSpec(BaseModel):
    """The scenario's `run:` block: how a run is carried out (workers, processes, storage, limits)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # `.inf` would be stored as null

    workers: int = Field(default=4, ge=1, le=256)
    """Worker threads (Optuna `n_jobs`), each with its own event loop."""
    questions_per_worker: int = Field(default=1, ge=1, le=256)
    """Questions each worker keeps in flight on its event loop: the width is workers x this."""
    processes: int = Field(default=1, ge=1, le=MAX_PROCESSES)
    """Processes on this machine sharing the run directory (each with `workers` workers): the first
    starts the others, and rate limits and budgets are divided among them (docs/operations.md)."""
    storage: str | None = None
    """SQLAlchemy URL of the study; default `sqlite:///<run_dir>/study.db`."""
    max_errors: int | None = Field(default=10, ge=0)
    """Stop the run (resumably) when more questions than this have error rows, counted over every
    session of the run. `null` means no limit."""
    repeats: int = Field(default=1, ge=1, le=1000)
    """Run every condition this many times with different seeds (reported as mean ± sd)."""
    shard_size: int | None = Field(default=None, ge=1)
    """(condition, question) pairs per Optuna trial. Chosen from the grid size when omitted."""
    runs_dir: str = "runs"
    """Where run directories are created, relative to the current directory."""
    claim_timeout_s: float = Field(default=3600.0, gt=0)
    """Shared storage: a pair claimed this long ago by a worker that never finished is taken over."""
    max_calls: int | None = Field(default=None, ge=1)
    """Halt (resumably) once this many requests have reached the model, over all sessions of the run."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Halt once this many tokens (prompt + completion) have been spent."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Halt once the spend, priced with `prices`, reaches this many dollars."""
    max_wall_s: float | None = Field(default=None, gt=0)
    """Halt this session after this many seconds."""
    per_call_timeout_s: float | None = Field(default=None, gt=0)
    """Overrides `model.timeout_s`: a call slower than this is retried, then recorded as an error."""
    interrupt_grace_s: float = Field(default=60.0, ge=0, le=86400)
    """After the first Ctrl-C or SIGTERM, questions in progress get this long; then they are cancelled."""
    max_retry_wait_s: float = Field(default=300.0, gt=0, le=86400)
    """The longest wait an endpoint may ask for (`Retry-After`); a longer one stops the run, resumably."""
    requests_per_minute: float | None = Field(default=None, gt=0)
    """A request rate shared by all workers of this process (docs/operations.md, "Rate limits")."""
    tokens_per_minute: float | None = Field(default=None, gt=0)
    """A token rate (prompt + completion) shared by all workers of this process."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Model name -> `{input: $, output: $}` per million tokens, for `max_cost_usd` and the report."""
    tracker: Literal["mlflow", "wandb"] | None = None
    """Log config, live per-condition metrics and the report to MLflow or W&B (experiments/run/tracking/tracker.py)."""

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, v: str | None) -> str | None:
        # Checked here, before a run directory exists: an unparsable URL used to fail only when the
        # store opened, leaving a half-made run directory behind.
        if v is not None:
            _storage().check_url(v)
        return v

    @field_validator("processes", mode="before")
    @classmethod
    def _process_bound(cls, v: object) -> object:
        # The bound in words (before the type check, so `--processes 1000` reads as before the scenario).
        if isinstance(v, int) and not isinstance(v, bool) and not 1 <= v <= MAX_PROCESSES:
            raise ValueError(f"{v} is outside 1 to {MAX_PROCESSES}. Give a count of processes on this machine "
                             "(more cores: medpanel worker on shared storage, docs/operations.md)")
        return v

    @property
    def process_count(self) -> int:
        """The processes this machine runs: `processes`, or 1 on shared storage, whose other
        processes are `medpanel worker`s started by hand."""
        return 1 if self.storage is not None and _storage().is_shared(self.storage) else self.processes


class Planned(BaseModel):
    """What `medpanel run` reads before the runner is imported (`planned`)."""

    run: RunSpec
    pipeline: str | None = None
    """The scenario's `pipeline:` as written (a name, or module:ClassName), or None: its child
    processes import its modules while they wait for their part (`execution/member.py`)."""


def planned(scenario: Path | None, resume: Path | None, overrides: list[str] | None, *,
            storage: str | None = None, processes: int | None = None) -> Planned:
    """The run block a session will use, resolved before the runner is imported: the scenario file
    read and its `--set` applied by the one reader (`yamlfile.read_scenario`), or on resume the run
    record's; then `--storage` and `--processes`, with their bounds (`--processes 1000` is refused
    here, in one line, before any child starts). Also the scenario's pipeline, as written.

    A problem of the file (its YAML, its size) is the `UserError` `load_scenario` would raise. A run
    block that does not validate reads as the defaults: the whole scenario's validation, which
    follows, names the field with its line.
    """
    session = {"storage": storage, "processes": processes}
    updated(RunSpec(), session, block="run")  # the options' bounds first: nothing is read before
    doc: Any = None
    if scenario is not None:
        doc, _ = read_scenario(scenario, overrides)  # a problem of the file: load_scenario's own line
    elif resume is not None and (resume / "run.json").is_file():
        with contextlib.suppress(UserError):  # not read here: `Runner.open` names what is wrong with it
            record = read_json(resume / "run.json", what="run.json", fix="Restore it from a backup")
            doc = record.get("scenario") if isinstance(record, dict) else None
    doc = doc if isinstance(doc, dict) else {}
    try:
        run = RunSpec.model_validate(doc.get("run") or {})
    except ValidationError:
        run = RunSpec()  # the whole scenario's validation, next, names the field and its line
    pipeline = doc.get("pipeline")
    return Planned(run=updated(run, session, block="run"), pipeline=pipeline if isinstance(pipeline, str) else None)


def session_overrides(**values: object) -> dict[str, object]:
    """The session's overrides by `run:` key (None: not given). Every key of `SESSION_OPTIONS` must be
    passed, so an option added there and not to the command fails every run, not silently."""
    if values.keys() != SESSION_OPTIONS.keys():
        missing, unknown = SESSION_OPTIONS.keys() - values.keys(), values.keys() - SESSION_OPTIONS.keys()
        raise TypeError(f"session overrides: missing {sorted(missing)}, unknown {sorted(unknown)}")
    return values


def updated(spec: _M, values: Mapping[str, object], *, block: str) -> _M:
    """`spec` with `values` set (None leaves a key as it is), validated exactly as the scenario's
    `block` is: a CLI override gets the YAML key's bounds, and its error names the CLI option."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return spec
    try:
        return type(spec).model_validate({**spec.model_dump(), **values})
    except ValidationError as exc:
        e = exc.errors()[0]
        name = str(e["loc"][0]) if e["loc"] else ""
        msg = e["msg"].removeprefix("Value error, ")
        option = CLI_OPTIONS.get(name)
        if option is None or name not in values:
            raise UserError(f"{msg}. Fix the value", field=f"{block}.{name}") from None
        if e["type"] == "value_error":  # medpanel's own check: its message names the fix
            raise UserError(msg, field=option) from None
        raise UserError(f"{msg}, got {values[name]!r} (the scenario key {block}.{name} has the same bounds). "
                        "Pass a value in range", field=option) from None
