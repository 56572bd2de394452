"""medpanel from Python: run a scenario, read a run back.

```python
import medpanel

result = medpanel.run("scenarios/quickstart.yaml", limit=2, model={"backend": "scripted"})
run = medpanel.load_run(result.run_dir)
run.rows                  # one result row per (condition, question, repeat)
run.transcripts()         # every TranscriptRecord, typed
df = run.to_pandas()      # the export's flat records (pip install 'medpanel[pandas]')
```

`run` takes what `medpanel run` takes: a scenario file (or a `Scenario`, or its dict), and
overrides. A keyword naming a scenario block (`settings`, `model`, `dataset`, `run`, `flags` ...)
is merged into that block; `limit`, `workers`, `repeats` and the budget options (`max_calls` ...)
override the run as the CLI options do. A user mistake raises `UserError` (the CLI's exit code 2);
a run that stops early (a budget, Ctrl-C) returns with `result.state` "stopped", resumable with
`medpanel.resume(result.run_dir)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.export import records
from medpanel.experiments.analysis.report import build_tables
from medpanel.experiments.analysis.transitions import call_events, run_docs
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.plan import make_plan
from medpanel.experiments.run.records import RunRecord, TranscriptRecord
from medpanel.experiments.run.rundir import RunData, load_record, load_transcript, transcript_path
from medpanel.experiments.run.rundir import load_run as _load_run_data
from medpanel.experiments.run.runner import Runner
from medpanel.experiments.run.scenario import Scenario, check_cost_budget, load_scenario
from medpanel.experiments.run.store import Row

PANDAS_EXTRA = "pip install 'medpanel[pandas]'"
RUN_OPTIONS = ("workers", "repeats", "max_calls", "max_tokens", "max_cost_usd", "max_errors", "max_wall_s",
               "requests_per_minute")
"""Keywords that override the run block for this run, as `medpanel run --workers ...` does."""


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


@dataclass
class Run:
    """A run directory read back: its record, its rows, its transcripts."""

    run_dir: Path
    record: RunRecord
    rows: list[Row]
    status: dict[str, Any] = field(default_factory=dict)
    _data: RunData | None = field(default=None, repr=False)

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

    def tables(self) -> list[Table]:
        """The report's tables (what `medpanel report` prints)."""
        docs = run_docs(self.run_dir, self.rows)
        return build_tables(self.rows, self.record.model_dump(mode="json", exclude_unset=True),
                            docs=docs, events=call_events(self.rows, docs))

    def records(self) -> list[dict[str, Any]]:
        """One flat record per row (what `medpanel export` writes)."""
        assert self._data is not None
        return list(records(self._data))

    def to_pandas(self) -> Any:
        """`records()` as a pandas DataFrame. Needs the `pandas` extra."""
        try:
            import pandas  # optional: the [pandas] extra
        except ImportError:
            raise ImportError(f"Run.to_pandas needs pandas, which medpanel does not install by default: "
                              f"{PANDAS_EXTRA}") from None
        return pandas.DataFrame(self.records())


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


def run(scenario: str | Path | Scenario | dict[str, Any], *, run_dir: str | Path | None = None,
        runs_dir: str | Path | None = None, limit: int | None = None,
        client_factory: Callable[[Any], Any] | None = None, **overrides: Any) -> RunResult:
    """Run a scenario (a YAML file, a `Scenario`, or its dict) and return how it ended.

    `overrides`: a scenario block by name (`settings={"rounds": 1}`, `model={"backend": "scripted"}`),
    merged into the scenario; or a run option (`workers=2`, `repeats=3`, `max_calls=100`).
    `client_factory` replaces the model client (tests: a scripted client with a responder)."""
    unknown = [k for k in overrides if k not in Scenario.model_fields and k not in RUN_OPTIONS]
    if unknown:
        raise UserError(f"unknown override {unknown[0]!r}. Use a scenario block ({', '.join(Scenario.model_fields)}) "
                        f"or a run option ({', '.join(RUN_OPTIONS)})", field="overrides")
    blocks = {k: v for k, v in overrides.items() if k in Scenario.model_fields}
    session = {k: v for k, v in overrides.items() if k in RUN_OPTIONS}
    sc, base = _scenario(scenario, blocks)
    repeats = session.pop("repeats", None)
    plan = make_plan(sc, base_dir=base, limit=limit, repeats=repeats, workers=session.pop("workers", None))
    runner = Runner.create(plan, run_dir=Path(run_dir) if run_dir else None,
                           runs_dir=Path(runs_dir) if runs_dir else None,
                           scenario_file=str(scenario) if isinstance(scenario, str | Path) else None)
    return _session(runner, session, client_factory)


def resume(run_dir: str | Path, *, retry_errors: bool = False, client_factory: Callable[[Any], Any] | None = None,
           **options: Any) -> RunResult:
    """Finish the missing pairs of a run (`medpanel run --resume`); `options` as `run`'s run options."""
    runner = Runner.open(Path(run_dir))
    runner.retry_errors = retry_errors
    return _session(runner, options, client_factory)


def _session(runner: Runner, options: dict[str, Any], client_factory: Callable[[Any], Any] | None) -> RunResult:
    runner.override(**options)
    check_cost_budget(runner.plan.scenario.run)
    runner.client_factory = client_factory
    status = runner.run()  # Ctrl-C drains as in the CLI (on the main thread; elsewhere no handler is installed)
    return RunResult(run_dir=runner.run_dir, state=status["state"], reason=status.get("reason"),
                     remaining=int(status.get("remaining", 0)), errors=int(status.get("errors", 0)),
                     pairs=len(runner.plan.pairs))
