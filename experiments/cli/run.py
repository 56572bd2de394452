"""`medpanel validate`, `run` (and `run --resume`) and `worker`: their options.

Start-up is on a run's clock (a run of 25 one-second calls per question in flight pays it whole),
so this module imports only typer and the run block (`scenario/runspec.py`: pydantic) at its top.
`run` first resolves the run block and starts the child processes of `run.processes` it asks for
(`children.prestart`, stdlib only), so their imports overlap its own; then it
imports what the commands do (`cli/run_session.py`: the runner and everything under it).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution import children
from medpanel.experiments.run.scenario.runspec import planned


def _session() -> ModuleType:
    # Late on purpose, for start-up: `run` starts its children before this import, so theirs
    # overlap it (the module docstring). The one function-level import of the commands.
    from medpanel.experiments.cli import run_session

    return run_session


def validate(scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
             limit: Annotated[int | None, typer.Option(help="Questions per subset.")] = None,
             set_: Annotated[list[str] | None, typer.Option("--set", help="Override a key: settings.rounds=1")] = None,
             ) -> None:
    """Check a scenario and print its conditions and question count."""
    _session().validate(scenario, limit, set_)


def run(
    scenario: Annotated[Path | None, typer.Argument(help="Scenario YAML file.")] = None,
    resume: Annotated[Path | None,
                      typer.Option("--resume", help="Finish the missing pairs of a run directory.")] = None,
    limit: Annotated[int | None, typer.Option(help="Questions per subset (overrides dataset.limit).")] = None,
    workers: Annotated[int | None, typer.Option(help="Parallel workers (overrides run.workers).")] = None,
    processes: Annotated[int | None, typer.Option(help="Processes on this machine, each with its workers "
                                                  "(overrides run.processes).")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Directory for this run.")] = None,
    repeat: Annotated[int | None, typer.Option("--repeat", help="Runs per condition with different seeds.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    max_calls: Annotated[int | None, typer.Option(help="Halt after this many model requests.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Halt after this many tokens.")] = None,
    max_cost_usd: Annotated[float | None, typer.Option(help="Halt at this spend (needs run.prices).")] = None,
    max_errors: Annotated[int | None, typer.Option(help="Halt when more questions than this errored.")] = None,
    max_wall_s: Annotated[float | None, typer.Option(help="Halt this session after this many seconds.")] = None,
    rpm: Annotated[float | None, typer.Option(help="Requests per minute, shared by all workers.")] = None,
    tpm: Annotated[float | None, typer.Option(help="Tokens per minute, shared by all workers.")] = None,
    storage: Annotated[str | None, typer.Option(help="Study storage URL, e.g. postgresql://user@host/db.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a scenario key, e.g. "
                                                   "settings.rounds=1 (repeatable).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="With --resume: run the pairs that have "
                                               "error rows again; each new result replaces its error row.")] = False,
    replay: Annotated[Path | None, typer.Option("--replay", help="Answer every request RUN_DIR answered from "
                                                "its stored responses (free); count the misses.")] = None,
    replay_strict: Annotated[bool, typer.Option("--replay-strict", help="With --replay: stop at the first "
                                                "request RUN_DIR never answered.")] = False,
) -> None:
    """Run a scenario (or resume a run) and print a short summary (medpanel report prints every table)."""
    if (scenario is None) == (resume is None):
        raise UserError("give a scenario file or --resume RUN_DIR (not both). Example: medpanel run "
                        "scenarios/quickstart.yaml", field="SCENARIO")
    # Before any import of the runner: the children import it meanwhile (see the module docstring).
    # Their count is the resolved run block's, `--set`, `--storage` and `--processes` applied.
    ahead = planned(scenario, resume, set_, storage=storage, processes=processes)
    children.prestart(ahead.run.process_count - 1, pipeline=ahead.pipeline)
    try:
        _session().run(scenario, resume, limit, workers, processes, run_dir, repeat, quiet, max_calls, max_tokens,
                       max_cost_usd, max_errors, max_wall_s, rpm, tpm, storage, set_, retry_errors, replay,
                       replay_strict)
    finally:
        children.discard()  # any the session did not take


def worker(
    target: Annotated[str, typer.Argument(help="A run directory, or the run's postgresql:// storage URL.")],
    workers: Annotated[int | None, typer.Option(help="Parallel workers in this process.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Local folder for this worker's files.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    rpm: Annotated[float | None, typer.Option(help="This process's share of the requests per minute.")] = None,
    tpm: Annotated[float | None, typer.Option(help="This process's share of the tokens per minute.")] = None,
) -> None:
    """Join a run whose storage is shared (PostgreSQL) from this process or machine."""
    _session().worker(target, workers, run_dir, quiet, rpm, tpm)


def register(app: typer.Typer) -> None:
    """Add `validate`, `run` and `worker` to the medpanel CLI."""
    app.command("validate")(validate)
    app.command("run")(run)
    app.command("worker")(worker)
