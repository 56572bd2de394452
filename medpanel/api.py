"""medpanel from Python: run a scenario, read a run back (docs/python-api.md).

```python
import medpanel

result = medpanel.run("scenarios/quickstart.yaml", limit=2, model={"backend": "scripted"},
                      run_dir="runs/demo", if_exists="resume")
run = result.load()
run.tables()["accuracy_per_condition_x_dataset"]   # a Table; a notebook shows it as HTML
df = run.to_pandas()      # one row per (condition, question, repeat), scalar columns (the [pandas] extra)
calls = run.calls()       # one row per model call
```

`run` takes what `medpanel run` takes: a scenario file (or a `Scenario`, or its dict), and
overrides. A keyword naming a scenario block (`settings`, `model`, `dataset`, `run`, `flags` ...)
is merged into that block; `limit`, `workers`, `repeats` and the budget options (`max_calls` ...)
override the run as the CLI options do. `if_exists` says what a `run_dir` that already holds a run
means: "error" (the default), "resume" (finish it, when it is the same scenario) or "new" (a fresh
directory beside it). A user mistake raises `UserError` (the CLI's exit code 2) naming the
argument and the call, not CLI flags; a run that stops early (a budget, Ctrl-C) returns with
`result.state` "stopped", resumable with `medpanel.resume(result.run_dir)`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from medpanel import frames
from medpanel.agents.tables import Table
from medpanel.experiments.analysis.export import records
from medpanel.experiments.analysis.report import run_tables, write_report
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.runspec import CLI_OPTIONS, SESSION_OPTIONS
from medpanel.experiments.run.scenario.scenario import Scenario, check_cost_budget, load_scenario
from medpanel.experiments.run.store.ownership import first_difference
from medpanel.experiments.run.store.records import RunRecord, TranscriptRecord
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import RunData, load_record, load_transcript, transcript_path
from medpanel.experiments.run.store.rundir import load_run as _load_run_data
from medpanel.experiments.run.store.storage import redact_url

PANDAS_EXTRA = frames.PANDAS_EXTRA
IF_EXISTS = ("error", "resume", "new")
RUN_OPTIONS = (*SESSION_OPTIONS, "repeats")
"""Keywords that override the run block for this run, as `medpanel run --workers ...` does: the
session's options (the CLI's own list) and, for a new run, `repeats`."""


@dataclass(frozen=True)
class RunResult:
    """What `run` returns: where the run is and how its session ended."""

    run_dir: Path
    state: str
    """complete, stopped (a budget, Ctrl-C, max_errors ...) or incomplete; see `reason`."""
    reason: str | None
    remaining: int
    """Pairs still to run (a resume runs exactly these)."""
    errors: int
    """Error rows in the run (counted as wrong; `--retry-errors` re-runs them)."""
    pairs: int

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def load(self) -> Run:
        return load_run(self.run_dir)


@dataclass(repr=False)
class Run:
    """A run directory read back: its record, its rows, its transcripts."""

    run_dir: Path
    record: RunRecord
    rows: list[Row]
    status: dict[str, Any] = field(default_factory=dict)
    _data: RunData | None = None

    def __repr__(self) -> str:
        state = self.status.get("state", "unknown")
        return (f"<Run {str(self.run_dir)!r}: {self.record.pipeline}, {len(self.record.conditions)} conditions, "
                f"{len(self.rows)} of {self.record.n_pairs or len(self.rows)} pairs done, {state}>")

    @property
    def conditions(self) -> list[str]:
        assert self._data is not None
        return self._data.conditions

    def transcript(self, row: Row) -> TranscriptRecord:
        return load_transcript(transcript_path(self.run_dir, row))  # never a path out of the run

    def transcripts(self) -> Iterator[TranscriptRecord]:
        """Every transcript, in the rows' order (condition, dataset, qid, repeat)."""
        for row in sorted(self.rows, key=lambda r: (r.condition, r.dataset, r.qid, r.repeat)):
            yield self.transcript(row)

    def tables(self) -> dict[str, Table]:
        """The report's tables (what `medpanel report` prints), by name (`Table.name`, its CSV's stem:
        `accuracy_per_condition_x_dataset`, `cost_per_question` ...), in the report's order."""
        out: dict[str, Table] = {}
        for t in run_tables(self.run_dir, self.rows, self.record):
            name, n = t.name, 1
            while name in out:  # two tables of one title keep both
                n += 1
                name = f"{t.name}_{n}"
            out[name] = t
        return out

    def records(self) -> list[dict[str, Any]]:
        """One flat record per row (what `medpanel export` writes: dotted keys, lists and dicts kept)."""
        assert self._data is not None
        return list(records(self._data))

    def to_pandas(self) -> Any:
        """One row per (condition, question, repeat), scalar columns: the outcome and counts, the
        condition's flags (`flag_<name>`) and the summary's scalar facts (`summary_<key>`). Needs the
        `pandas` extra; `pandas.DataFrame(run.records())` is the full export."""
        assert self._data is not None
        return frames.results(self._data)

    def calls(self) -> Any:
        """One row per model call (agent, role, step, round, turn, model, tokens, latency, cache hit ...)."""
        assert self._data is not None
        return frames.calls(self._data)


def load_run(run_dir: str | Path) -> Run:
    """Read a run directory (any format version); a `UserError` names what is missing or damaged."""
    data = _load_run_data(Path(run_dir))
    return Run(run_dir=data.run_dir, record=load_record(data.run_dir), rows=data.rows, status=data.status,
               _data=data)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _scenario(source: str | Path | Scenario | dict[str, Any], blocks: dict[str, Any]) -> tuple[Scenario, Path]:
    if isinstance(source, Scenario):
        data, base = source.model_dump(), Path.cwd()
    elif isinstance(source, dict):
        data, base = dict(source), Path.cwd()
    else:
        path = Path(source)
        data, base = load_scenario(path).model_dump(), path.parent
    if data.get("models") and "model" not in blocks:
        data.pop("model", None)  # the dump's `model` is its first model's: new `models:` choose it anew
    try:
        return Scenario.model_validate(_merge(data, blocks)), base
    except ValueError as exc:  # pydantic's ValidationError
        raise UserError(str(exc).splitlines()[0] + ". " + " ".join(str(exc).splitlines()[1:3]),
                        field="overrides") from None


_FLAGS = {flag: name for name, flag in CLI_OPTIONS.items()} | {
    "--run-dir": "run_dir", "--retry-errors": "retry_errors=True", "--set": "the scenario overrides"}


def _python_words(text: str) -> str:
    """A message written for the CLI, in the words of this API: the call and the argument, not the flag."""
    text = re.sub(r"medpanel run --resume (\S+?)([,.;]?(?:\s|$))", r"medpanel.resume('\1')\2", text)
    text = re.sub(r"medpanel run (\S+) --run-dir (\S+)", r"medpanel.run('\1', run_dir='\2')", text)
    for flag in sorted(_FLAGS, key=len, reverse=True):
        text = re.sub(rf"{re.escape(flag)}(?![\w-])", _FLAGS[flag], text)
    return text


@contextlib.contextmanager
def _api_errors() -> Iterator[None]:
    try:
        yield
    except UserError as exc:
        message = str(exc)
        for part in (exc.file, exc.field):  # UserError's text is "<file>: <field>: <message>"
            if part and message.startswith(f"{part}: "):
                message = message[len(part) + 2:]
        field_name = "run_dir" if exc.field == "RUN_DIR" else _FLAGS.get(exc.field or "", exc.field)
        raise UserError(_python_words(message), file=exc.file, field=field_name) from None


def run(scenario: str | Path | Scenario | dict[str, Any], *, run_dir: str | Path | None = None,
        runs_dir: str | Path | None = None, limit: int | None = None,
        if_exists: Literal["error", "resume", "new"] = "error",
        client_factory: Callable[[Any], Any] | None = None, **overrides: Any) -> RunResult:
    """Run a scenario (a YAML file, a `Scenario`, or its dict) and return how it ended.

    `overrides`: a scenario block by name (`settings={"rounds": 1}`, `model={"backend": "scripted"}`),
    merged into the scenario; or a run option (`workers=2`, `repeats=3`, `max_calls=100`).
    `if_exists`: what a `run_dir` that already holds a run means: "error", "resume" (finish that
    run; it must be the same scenario, so re-running a notebook cell goes on where it stopped) or
    "new" (a fresh directory beside it, `<run_dir>-2` ...).
    `client_factory` replaces the model client (tests: a scripted client with a responder)."""
    with _api_errors():
        if if_exists not in IF_EXISTS:
            raise UserError(f"if_exists is {if_exists!r}. Use one of: {', '.join(IF_EXISTS)}", field="if_exists")
        unknown = [k for k in overrides if k not in Scenario.model_fields and k not in RUN_OPTIONS]
        if unknown:
            raise UserError(f"unknown override {unknown[0]!r}. Use a scenario block "
                            f"({', '.join(Scenario.model_fields)}) or a run option ({', '.join(RUN_OPTIONS)})",
                            field="overrides")
        blocks = {k: v for k, v in overrides.items() if k in Scenario.model_fields}
        session = {k: v for k, v in overrides.items() if k in RUN_OPTIONS}
        sc, base = _scenario(scenario, blocks)
        repeats = session.pop("repeats", None)
        plan = make_plan(sc, base_dir=base, limit=limit, repeats=repeats, workers=session.pop("workers", None))
        target = Path(run_dir) if run_dir else None
        if target is not None and (target / "run.json").exists():
            if if_exists == "resume":
                _same_scenario(target, plan.scenario)
                return _resume(target, False, client_factory, session)
            if if_exists == "new":
                target = _beside(target)
            else:
                raise UserError(f"{target} already holds a run. Finish it with medpanel.resume({str(target)!r}) "
                                "or if_exists='resume', start a fresh one beside it with if_exists='new', or choose "
                                "another run_dir", field="run_dir")
        runner = Runner.create(plan, run_dir=target, runs_dir=Path(runs_dir) if runs_dir else None,
                               scenario_file=str(scenario) if isinstance(scenario, str | Path) else None)
        return _session(runner, session, client_factory)


def _beside(run_dir: Path) -> Path:
    n = 2
    while (run_dir.with_name(f"{run_dir.name}-{n}") / "run.json").exists():
        n += 1
    return run_dir.with_name(f"{run_dir.name}-{n}")


def _same_scenario(run_dir: Path, scenario: Scenario) -> None:
    """if_exists='resume' finishes the run only when it is this scenario; a changed one would be
    ignored silently (a resume runs what run.json planned)."""
    stored = load_record(run_dir).scenario
    wanted = scenario.model_dump(mode="json")
    if wanted["run"].get("storage"):
        wanted["run"]["storage"] = redact_url(wanted["run"]["storage"])
    for block in (stored, wanted):  # this session's options, not the plan
        block.get("run", {}).pop("workers", None)
    differ = first_difference(stored, wanted, "")
    if differ is not None:
        raise UserError(f"{run_dir} holds a run of another scenario ({differ} differs), so if_exists='resume' "
                        "cannot finish it. Use if_exists='new' or another run_dir", field="run_dir")


def resume(run_dir: str | Path, *, retry_errors: bool = False, client_factory: Callable[[Any], Any] | None = None,
           **options: Any) -> RunResult:
    """Finish the missing pairs of a run (`medpanel run --resume`); `options` as `run`'s run options."""
    with _api_errors():
        return _resume(Path(run_dir), retry_errors, client_factory, options)


def _resume(run_dir: Path, retry_errors: bool, client_factory: Callable[[Any], Any] | None,
            options: dict[str, Any]) -> RunResult:
    unknown = [k for k in options if k not in RUN_OPTIONS]
    if unknown:
        raise UserError(f"unknown option {unknown[0]!r}. A resume takes the run options: {', '.join(RUN_OPTIONS)}",
                        field="options")
    runner = Runner.open(run_dir)
    runner.retry_errors = retry_errors
    return _session(runner, options, client_factory)


def _session(runner: Runner, options: dict[str, Any], client_factory: Callable[[Any], Any] | None) -> RunResult:
    runner.override(**options)
    check_cost_budget(runner.plan.scenario.run)
    runner.client_factory = client_factory
    with runner.tracking() as tracker:
        status = runner.run()  # Ctrl-C drains as in the CLI (on the main thread; elsewhere no handler is installed)
        if tracker is not None:  # run.tracker logs the report the CLI would write: written here, then logged
            run = load_run(runner.run_dir)
            tracker.report(write_report(run.run_dir, list(run.tables().values())) if run.rows else None)
    reason = status.get("reason")
    return RunResult(run_dir=runner.run_dir, state=status["state"], reason=_python_words(reason) if reason else None,
                     remaining=int(status.get("remaining", 0)), errors=int(status.get("errors", 0)),
                     pairs=len(runner.plan.pairs))
