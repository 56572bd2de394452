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

The count is the resolved run block's (`scenario/runspec.py: planned`, its bound checked there,
before a child starts), and no more children start ahead than the machine has cores (the session
starts the rest once the whole scenario is validated). Each child is tied to the
process that started it (`tether.py`), so none outlives it, whatever ends it.

This module imports nothing heavy (the tether, stdlib only): `medpanel run` calls it before its
own imports.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from medpanel.experiments.run.execution import tether

MEMBER = "medpanel.experiments.run.execution.member"
PIPELINE_OPTION = "--pipeline"
"""`member --pipeline NAME [RUN_DIR]`: the pipeline whose modules it imports while it waits."""

_started: list[subprocess.Popen[str]] = []
"""Children started ahead of their runner's session, not yet taken by its `Group`."""


def launch(run_dir: Path | None = None, pipeline: str | None = None) -> subprocess.Popen[str]:
    """One child process: it imports the runner (and `pipeline`'s modules, a name of the scenario's
    `pipeline:`), then waits on stdin for its part."""
    # Its own session: a terminal's Ctrl-C reaches the runner only, which forwards it once (a child
    # that got it from both would take the second as "abort now").
    args = [sys.executable, "-m", MEMBER, *([PIPELINE_OPTION, pipeline] if pipeline else []),
            *([str(run_dir)] if run_dir is not None else [])]
    # Tied to this process (tether.py): it ends with this one, however this one ends.
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env=tether.child_env(), pass_fds=(tether.lifeline(),))


def prestart(count: int, pipeline: str | None = None) -> None:
    """Start `count` children now, ahead of the session that will take them: at most one fewer than
    the machine's cores (the session starts any more it needs once its settings are validated).
    `pipeline`, the scenario's as written: they import its modules while they wait for their part."""
    for _ in range(max(min(count, (os.cpu_count() or 1) - 1), 0)):
        _started.append(launch(pipeline=pipeline))


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
