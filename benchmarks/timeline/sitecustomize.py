"""Start-up timeline of every medpanel process of a benchmark run (`bench_processes --timeline`).

Python imports `sitecustomize` at start-up from the path; the benchmark puts this folder on
`PYTHONPATH` of the `medpanel run` it starts, so the runner and each child it spawns (which inherit
the environment) load it. Nothing here changes what runs: it writes, for its process, one JSON line
per stage to `$MEDPANEL_TIMELINE_DIR/<pid>.jsonl` (epoch seconds): the process's exec (read from
/proc, so the interpreter's own start-up counts), the first stage functions it reaches, and its
exit. Stages are wrapped when their module is imported, so the timeline costs no import of its own.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NoReturn

_DIR = os.environ.get("MEDPANEL_TIMELINE_DIR")

STAGES: dict[str, tuple[str, ...]] = {
    "medpanel.experiments.cli.main": ("main",),
    "medpanel.experiments.cli.run": ("run",),
    "medpanel.experiments.run.scenario.scenario": ("load_scenario",),
    "medpanel.experiments.run.scenario.plan": ("make_plan",),
    "medpanel.experiments.run.execution.runner": ("Runner.create", "Runner.open", "Runner.run", "Runner.prepare",
                                                  "Runner._prior", "Runner._work", "Runner._optuna_storage"),
    "medpanel.experiments.run.execution.processes": ("Group.spawn", "Group.send", "Group.wait", "stay_until_done"),
    "medpanel.experiments.run.execution.study": ("new_study", "member_study", "shared_study"),
    "medpanel.experiments.run.store.store": ("Store.__init__", "Store.claim", "Store.commit"),
    "medpanel.agents.model.backends": ("preload",),
    "medpanel.experiments.cli.output": ("print_summary", "write_full_report"),
}
"""Module -> the functions whose first start and end each process records."""
TIMED = ("Store.claim", "Store.commit")
"""Also summed over every call (wall seconds in the calling thread: SQLite's write lock, busy
waits and the interpreter lock included), written when the process's session ends."""


def _exec_time() -> float | None:
    """When this process was exec'd (epoch), from /proc: before the interpreter's own start-up."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration):
        return None


class _Log:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, f"{os.getpid()}.jsonl")
        self.lock = threading.Lock()
        self.seen: set[str] = set()
        self.timed: dict[str, list[float]] = {}
        """name -> [calls, seconds, longest]"""

    def add(self, name: str, seconds: float) -> None:
        with self.lock:
            t = self.timed.setdefault(name, [0, 0.0, 0.0])
            t[0], t[1], t[2] = t[0] + 1, t[1] + seconds, max(t[2], seconds)

    def totals(self) -> None:
        with self.lock, open(self.path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "event": "totals", "t": time.time(),
                                "timed": self.timed}) + "\n")

    def event(self, name: str, t: float | None = None, *, once: bool = True) -> None:
        with self.lock:
            if once and name in self.seen:
                return
            self.seen.add(name)
            with open(self.path, "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(),
                                    "event": name, "t": time.time() if t is None else t}) + "\n")


def _wrap(log: _Log, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        log.event(f"{label} start")
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if label in TIMED:
                log.add(label, time.perf_counter() - t)
            log.event(f"{label} end")
            if label == "Runner.run":
                log.totals()
    return wrapper


def _instrument(log: _Log, module: ModuleType, names: Sequence[str]) -> None:
    for name in names:
        owner: Any = module
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        fn = getattr(owner, attr, None) if owner is not None else None
        if fn is None:
            continue
        raw = owner.__dict__.get(attr, fn) if isinstance(owner, type) else fn
        wrapped: Any = _wrap(log, name, raw.__func__ if isinstance(raw, classmethod) else raw)
        setattr(owner, attr, classmethod(wrapped) if isinstance(raw, classmethod) else wrapped)


class _Loader(importlib.abc.Loader):
    """A module's own loader, and its stages instrumented once the module has run."""

    def __init__(self, loader: Any, log: _Log, fullname: str) -> None:
        self.loader, self.log, self.fullname = loader, log, fullname

    def __getattr__(self, name: str) -> Any:  # get_code, is_package...: what runpy asks a loader
        return getattr(self.loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.log.event(f"import {self.fullname} start")
        self.loader.exec_module(module)
        self.log.event(f"import {self.fullname} end")
        _instrument(self.log, module, STAGES[self.fullname])


class _Finder(importlib.abc.MetaPathFinder):
    """Hands each module in `STAGES` its own loader wrapped in `_Loader`."""

    def __init__(self, log: _Log) -> None:
        self.log = log

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in STAGES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader, self.log, fullname)
            return spec
        return None


def _install(directory: str) -> None:
    log = _Log(directory)
    started = _exec_time()
    if started is not None:
        log.event("exec", started)
    log.event("sitecustomize")
    sys.meta_path.insert(0, _Finder(log))
    atexit.register(lambda: log.event("exit"))
    # A process that leaves without the interpreter's teardown (the CLI's entry, a member) runs no
    # atexit function of its own after its last flush: its exit is logged as it calls os._exit.
    leave = os._exit

    def _exit(status: int) -> NoReturn:
        log.event("exit")
        leave(status)

    os._exit = _exit


if _DIR:
    _install(_DIR)
