"""Starting the child processes of `run.processes` before the runner's own start-up (stdlib only).

A child spends its first seconds importing the runner (AutoGen, openai, SQLAlchemy, Optuna), and
needs nothing from the run to do it: its part comes on stdin later (`processes.MemberSpec`, which
names the run directory). So `medpanel run` starts them (`prestart`) as soon as it has read how
many it needs, before it imports anything heavy itself, and their imports overlap the runner's
imports, plan and study instead of following them; `processes.Group.spawn` takes these first
(`take`) and starts only the ones missing. One started and never taken (the count read first was
wrong, the run failed before its session) is ended by `discard`: its stdin closes and it exits.

Why a new interpreter (spawn) rather than `os.fork()` of the runner: a fork after the runner's
imports would start a child without its import CPU, but only once those imports are done, which
is no sooner than a new interpreter importing on a free core (what `run.processes` is for); it
is safe only before any thread exists (the progress bar's, the store's, a notebook's own under
`medpanel.run()`); and a fork before the imports saves only the interpreter's start (about 50 ms).

Every bound is checked before a child starts (`planned_processes`): `--processes` outside 1 to
`MAX_PROCESSES` is refused in one line, and no more children start ahead than the machine has
cores (the session starts the rest once the scenario is validated). Each child is tied to the
process that started it (`tether.py`), so none outlives it, whatever ends it.

This module imports nothing heavy of medpanel's (the reader of a user's files and the one-line error,
both stdlib only): `medpanel run` calls it before its own imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution import tether
from medpanel.inputs import read_input_text

MAX_PROCESSES = 64
"""The most processes one run may use on one machine (`run.processes`, `--processes`): each is a
Python interpreter with the runner imported (about 150 MB). More cores than this are for
`medpanel worker` on shared storage (docs/operations.md)."""
MAX_RECORD_BYTES = 1_000_000
"""The most read of a scenario or a run.json to find the count (a scenario's own bound)."""

MEMBER = "medpanel.experiments.run.execution.member"

_started: list[subprocess.Popen[str]] = []
"""Children started ahead of their runner's session, not yet taken by its `Group`."""


def launch(run_dir: Path | None = None) -> subprocess.Popen[str]:
    """One child process: it imports the runner, then waits on stdin for its part."""
    # Its own session: a terminal's Ctrl-C reaches the runner only, which forwards it once (a child
    # that got it from both would take the second as "abort now").
    args = [sys.executable, "-m", MEMBER, *([str(run_dir)] if run_dir is not None else [])]
    # Tied to this process (tether.py): it ends with this one, however this one ends.
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env=tether.child_env(), pass_fds=(tether.lifeline(),))


def prestart(count: int) -> None:
    """Start `count` children now, ahead of the session that will take them: at most one fewer than
    the machine's cores (the session starts any more it needs once its settings are validated)."""
    for _ in range(max(min(count, (os.cpu_count() or 1) - 1), 0)):
        _started.append(launch())


def take(count: int) -> list[subprocess.Popen[str]]:
    """Up to `count` of the children started ahead (those still alive), the rest discarded."""
    alive = [p for p in _started if p.poll() is None]
    _started.clear()
    for extra in alive[count:]:
        _end(extra)
    return alive[:count]


def discard() -> None:
    """End the children started ahead and never taken (they exit once their stdin closes)."""
    for proc in _started:
        _end(proc)
    _started.clear()


def _end(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def planned_processes(scenario: Path | None, resume: Path | None, option: int | None,
                      overrides: list[str] | None) -> int:
    """How many processes the run will use, read cheaply (no validation) to start children early.

    `--processes` (refused here, in one line, when outside 1 to `MAX_PROCESSES`: nothing has started
    yet), else `run.processes` of the scenario (a `--set run.processes=N` included) or of the run
    directory's record. A guess otherwise: anything unreadable or out of bounds is 1 (the scenario's
    own validation names it in one line), and the session starts or ends children to match the
    validated count, so a wrong guess costs time, never correctness. The files are read through
    `medpanel.inputs`: a FIFO or a device is refused before a byte is read.
    """
    if option is not None:
        if not 1 <= option <= MAX_PROCESSES:
            raise UserError(f"{option} is outside 1 to {MAX_PROCESSES}. Give a count of processes on this machine "
                            "(more cores: medpanel worker on shared storage, docs/operations.md)",
                            field="--processes")
        return option
    for item in overrides or []:
        key, _, value = item.partition("=")
        if key.strip() == "run.processes":
            return _int(value)
    try:
        run: Any
        if resume is not None:
            record = json.loads(read_input_text(resume / "run.json", what="run record", max_bytes=MAX_RECORD_BYTES))
            run = record.get("scenario", {}).get("run", {})
        elif scenario is not None:
            import yaml  # a few milliseconds; the scenario module (pydantic, SQLAlchemy) is not needed yet

            text = read_input_text(scenario, what="scenario", max_bytes=MAX_RECORD_BYTES)
            run = (yaml.safe_load(text) or {}).get("run", {})
        else:
            return 1
        if not isinstance(run, dict) or not str(run.get("storage") or "sqlite").startswith("sqlite"):
            return 1  # shared storage has `medpanel worker`s, not children
        return _int(run.get("processes", 1))
    except Exception:  # a FIFO or a device (InputFileError), bad YAML: the validation names it in one line
        return 1


def _int(value: Any) -> int:
    """A count within bounds, else 1 (the validation that follows refuses it in one line)."""
    try:
        n = int(str(value).strip())
    except ValueError:
        return 1
    return n if 1 <= n <= MAX_PROCESSES else 1
