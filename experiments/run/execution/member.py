"""A child process of a runner (`run.processes`):
`python -m medpanel.experiments.run.execution.member [--pipeline NAME] [RUN_DIR]`.

Started by `processes.Group` or, ahead of its runner's session, by `children.prestart` (then
without RUN_DIR: its part names it; with the scenario's pipeline, whose modules it imports while it
waits), never by hand. Its own entry point rather than a `medpanel` command,
so it imports the runner and nothing of the CLI or the report (a second of CPU less before it
takes its first question). Its part (`MemberSpec`) comes on stdin once the runner's study is
open; its tally and final status go to stdout as JSON lines the runner reads. Exit codes as the
CLI's: 0 the run is complete, 3 stopped, 2 a problem named in one line.
"""

from __future__ import annotations

import os
import signal

# Until the session installs its own handlers (`signals.py`), a Ctrl-C or SIGTERM the runner
# forwards ends this process quietly: it has claimed nothing yet. Set before the imports below,
# which take seconds.
for _sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_sig, lambda signum, frame: os._exit(3))

# Tied to the runner before anything else: whatever ends it (a SIGKILL too), this process ends.
from medpanel.experiments.run.execution import tether  # noqa: E402

tether.hold()

import contextlib  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from medpanel.agents.model.replay import Replay  # noqa: E402
from medpanel.agents.pipelines.registry import own as own_pipelines  # noqa: E402
from medpanel.experiments.errors import UserError  # noqa: E402
from medpanel.experiments.run.execution.children import PIPELINE_OPTION  # noqa: E402
from medpanel.experiments.run.execution.processes import MemberSpec, member_reporter  # noqa: E402
from medpanel.experiments.run.execution.runner import Runner  # noqa: E402

# What Optuna's RDBStorage imports on first use (SQLAlchemy's ORM, alembic and its templates):
# about 0.75 s, imported here, while the runner still opens the study, rather than after this
# process has its part (the runner has imported them creating the run).
STORAGE_MODULES = ("sqlalchemy.orm", "alembic.migration", "alembic.script", "optuna.storages._rdb.models")


def _import_ahead(pipeline: str | None) -> None:
    """While the part has not come: the modules of the scenario's pipeline (one of medpanel's own:
    about 0.25 s of AutoGen's agents and the panel's roles, which its runner imported planning the
    run), then what Optuna's storage imports on first use, in the order the part will need them."""
    if pipeline is not None:
        entry = own_pipelines().get(pipeline)
        if entry is not None:
            with contextlib.suppress(ImportError):  # imported again, and its error raised, where it is used
                importlib.import_module(entry.module)
    for name in STORAGE_MODULES:
        with contextlib.suppress(ImportError):  # another Optuna's layout: imported on first use instead
            importlib.import_module(name)


def _arguments(argv: list[str]) -> tuple[str | None, Path | None]:
    """`[--pipeline NAME] [RUN_DIR]` (`children.launch`): the pipeline and the run directory given."""
    pipeline = None
    if argv[:1] == [PIPELINE_OPTION] and len(argv) > 1:
        pipeline, argv = argv[1], argv[2:]
    return pipeline, Path(argv[0]) if argv else None


def main(given: Path | None, pipeline: str | None = None) -> int:
    _import_ahead(pipeline)
    raw = sys.stdin.readline()
    if not raw.strip():
        return 0  # the runner found nothing for this child to do
    spec = MemberSpec.model_validate_json(raw)
    named = Path(spec.run_dir) if spec.run_dir is not None else None
    run_dir = given or named
    if run_dir is None or (given is not None and named is not None and named.resolve() != given.resolve()):
        raise UserError(f"{given or 'no run directory'} is not the run directory of this process's runner "
                        f"({named}): a member process is started by its runner (run.processes), never by hand",
                        field="RUN_DIR")
    runner = Runner.open(run_dir, member=spec)
    runner.override(**spec.run)
    runner.retry_errors = spec.retry_errors
    runner.replay = Replay(Path(spec.replay), strict=spec.replay_strict) if spec.replay else None
    hook, flush = member_reporter()
    status = runner.run(progress=hook)
    flush(runner.tally)
    sys.stdout.write(json.dumps({"status": status}) + "\n")
    sys.stdout.flush()
    return 0 if status["state"] == "complete" else 3


def _exit(code: int) -> None:
    """Exit without the interpreter's teardown (every module of the runner, a second or so of a
    run's end the runner would wait for): what this process owes is flushed, its store closed."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        pipeline, given = _arguments(sys.argv[1:])
        code = main(given, pipeline)
    except UserError as exc:
        sys.stderr.write(f"error: {exc}\n")
        code = exc.exit_code
    _exit(code)
