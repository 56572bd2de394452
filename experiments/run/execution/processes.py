"""Every core of one machine: `run.processes: N` runs N processes on one run directory.

One Python process is bound by its interpreter lock, so a run on a machine with several cores
starts N-1 more: the runner (the process the user started, which holds `runner.lock`) launches
children (`member.py`) in their own sessions as its session starts, hands each its part on stdin
(a `MemberSpec`: the study to join, the session's settings, its index for `shares.py`), and works
itself as the Nth. They all join the one Optuna study in the run's own SQLite file, so the
GridSampler hands each shard to one trial, the store's claims keep every pair exclusive, and a
process with nothing left helps with any pair nobody holds, until every pair is done.

- **Signals**: the children are not in the terminal's process group; the runner forwards every
  Ctrl-C or SIGTERM it gets, one for one, so each child drains (or, at the second, aborts) exactly
  as the runner does. When the runner stops for any other reason it sends each child one SIGTERM.
  A child whose runner has gone (killed) drains by itself.
- **A child that dies** (SIGKILL, a crash) never holds the others up: the runner notices its exit,
  releases the claims it left, and those pairs are done by whoever comes next. The runner waits for
  its children at the end no longer than the grace period allows, then kills what is left (a
  resume redoes it).
- **Progress**: each child prints its own session's tally as a JSON line on stdout (at most four
  times a second, and at the end); the runner's progress bar shows the sum.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution import children
from medpanel.experiments.run.execution.shared import Shared
from medpanel.experiments.run.execution.worker import Worker
from medpanel.experiments.run.scenario.runspec import SESSION_OPTIONS
from medpanel.experiments.run.store.runlock import lock_holder
from medpanel.experiments.run.store.storage import Pair
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.tracking.state import ProgressHook, Stop, Tally

log = logging.getLogger("medpanel.runner")
WATCH_S = 0.1
"""How often the runner looks at its children (exits, its own stop) and a child at its runner."""
CHECK_S = 0.05
"""How often a process with nothing left to claim looks whether the others have finished (at least)."""
REPORT_S = 0.25
"""The shortest interval between two tally lines of a child."""
WAIT_MARGIN_S = 15.0
"""Beyond the grace period and the backstop, how long the runner waits for a stopping child."""
SESSION_KEYS = tuple(SESSION_OPTIONS)
"""The run settings a session may override (`medpanel run --resume --workers ...`), handed to children."""
TALLY_KEYS = tuple(f.name for f in dataclasses.fields(Tally) if f.name != "lock")
"""The counts a child reports to the runner: every field of `Tally` but its lock."""


class MemberSpec(BaseModel):
    """What a child process needs from its runner (sent on the child's stdin, not its command line)."""

    runner_pid: int
    """The runner, which must hold the run's lock: a child joins no other process's run."""
    run_dir: str | None = None
    """The run directory (a child started before its runner knew it has none on its command line)."""
    owner: str
    """The child's claim owner: known to the runner, which releases its claims if it dies."""
    index: int
    processes: int
    study: str
    grid: list[int]
    """The shards of the runner's study (its GridSampler's search space, which must be the same)."""
    base_url: str | None = None
    """The embedded model server the runner started, which every process uses."""
    run: dict[str, object]
    """The session's run settings (see `SESSION_KEYS`)."""
    retry_errors: bool = False
    replay: str | None = None
    replay_strict: bool = False


def session_settings(run: BaseModel) -> dict[str, object]:
    values = run.model_dump(mode="json")
    return {k: values[k] for k in SESSION_KEYS}


class _Child:
    def __init__(self, proc: subprocess.Popen[str], owner: str) -> None:
        self.proc = proc
        self.owner = owner
        self.tally: dict[str, float] = {}
        self.status: dict[str, object] | None = None
        self.reported = False
        """Its exit has been noticed (and, if it died, its claims released)."""


class Group:
    """The runner's children: started, watched, signalled, waited for."""

    def __init__(self, run_dir: Path, stop: Stop, store: Store, *, grace_s: float, backstop_s: float) -> None:
        self.run_dir = run_dir
        self.stop = stop
        self.store = store
        self.wait_s = grace_s + backstop_s + WAIT_MARGIN_S
        self.children: list[_Child] = []
        self.signals_sent = 0
        # Re-entrant: `forward` runs in the signal handler, on the main thread, and a second Ctrl-C can
        # land while the first one's `forward` holds the lock (a plain Lock then waits for itself
        # forever, and the abort never comes).
        self.lock = threading.RLock()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._show: Callable[[], None] | None = None

    # -- starting ------------------------------------------------------------------------------

    def spawn(self, count: int) -> None:
        """Have `count` children: those `medpanel run` started ahead (`children.prestart`) and new
        ones for the rest. Each imports medpanel (seconds of CPU) while the runner opens the study,
        then waits on its stdin for its part (`send`)."""
        procs = children.take(count)
        procs += [children.launch(self.run_dir) for _ in range(count - len(procs))]
        for proc in procs:
            assert proc.stdout is not None
            child = _Child(proc, "")
            with self.lock:
                self.children.append(child)
            self._thread(functools.partial(self._read, child, proc.stdout), "medpanel-child-out")
        self._thread(self._watch, "medpanel-children")

    def send(self, specs: list[MemberSpec]) -> None:
        """Each child its part: from now on it works (a child given none exits at once)."""
        for child, spec in zip(self.children, specs, strict=True):
            child.owner = spec.owner
            # A child started ahead of the run learns its directory here.
            self._close(child, spec.model_copy(update={"run_dir": str(self.run_dir)}).model_dump_json() + "\n")

    @staticmethod
    def _close(child: _Child, text: str = "") -> None:
        stdin = child.proc.stdin
        if stdin is None or stdin.closed:
            return
        with contextlib.suppress(OSError):  # a child that died: its pipe is broken
            stdin.write(text)
        with contextlib.suppress(OSError):
            stdin.close()

    def _thread(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _read(self, child: _Child, out: IO[str]) -> None:
        for line in out:
            try:
                doc = json.loads(line)
            except ValueError:
                sys.stdout.write(line)  # not a report: the child's own output, shown as it is
                continue
            if isinstance(doc, dict) and isinstance(doc.get("tally"), dict):
                child.tally = doc["tally"]
            if isinstance(doc, dict) and isinstance(doc.get("status"), dict):
                child.status = doc["status"]

    # -- signals and stops ---------------------------------------------------------------------

    def forward(self, signum: int, press: int) -> None:
        """The runner got its `press`-th Ctrl-C or SIGTERM: each child gets one of its own."""
        with self.lock:
            self._send(signum)
            self.signals_sent = max(self.signals_sent, press)

    def _send(self, signum: int) -> None:
        for c in self.children:
            if c.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c.proc.pid, signum)

    def drain(self) -> None:
        """One SIGTERM to each child, unless a signal was forwarded already: they finish what they
        have in flight and stop (a second would abort them)."""
        with self.lock:
            if self.signals_sent == 0:
                self._send(signal.SIGTERM)
                self.signals_sent = 1

    def _watch(self) -> None:
        shown: list[dict[str, float]] = []
        while not self._done.wait(WATCH_S):
            if self.stop.is_set:  # the runner stopped by itself (a budget, an error limit): they stop too
                self.drain()
            self.reap()
            with self.lock:
                reports = [c.tally for c in self.children]
            if self._show is not None and reports != shown:
                shown = reports
                with contextlib.suppress(Exception):  # a progress bar's failure is not the run's
                    self._show()

    def reap(self) -> None:
        """Notice children that have exited; release the claims of any that died holding some."""
        ended = []
        with self.lock:
            for c in self.children:
                if not c.reported and c.proc.poll() is not None:
                    c.reported = True
                    ended.append(c)
        for c in ended:
            code = c.proc.returncode
            if c.status is None:
                how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
                log.warning("worker process %d ended (%s) before it finished; the questions it held are "
                            "redone by the others or on resume", c.proc.pid, how)
        owners = [c.owner for c in ended if c.owner]
        if owners:
            with contextlib.suppress(Exception):  # the store failing is the runner's own to report
                self.store.release_owned(owners)

    def live_owners(self) -> list[str]:
        with self.lock:
            return [c.owner for c in self.children if c.proc.poll() is None]

    # -- progress and the end ------------------------------------------------------------------

    def combined(self, own: Tally) -> Tally:
        """The runner's tally plus each child's session so far (the progress bar's figures)."""
        total = Tally(**{k: getattr(own, k) for k in TALLY_KEYS})
        with self.lock:
            reports = [c.tally for c in self.children]
        for r in reports:
            for k in TALLY_KEYS:
                setattr(total, k, getattr(total, k) + type(getattr(total, k))(r.get(k, 0)))
        return total

    def progress(self, hook: ProgressHook | None, own: Tally, total: int) -> ProgressHook | None:
        """The runner's progress hook showing every process's counts; also called by the watcher, so
        the bar moves while only children commit."""
        if hook is None:
            return None
        self._show = lambda: hook(self.combined(own), total)
        return lambda t, n: hook(self.combined(t), n)

    def wait(self) -> None:
        """Wait for every child to end; one still running `wait_s` after the stop is killed (its
        claims are released here, or on resume)."""
        deadline: float | None = None
        for c in self.children:
            self._close(c)  # a child never sent its part (nothing was left to do) ends now
        try:
            while running := [c for c in self.children if c.proc.poll() is None]:
                if (self.stop.is_set or self.signals_sent) and deadline is None:
                    deadline = time.monotonic() + self.wait_s
                if deadline is not None and time.monotonic() > deadline:
                    for c in running:
                        log.warning("worker process %d did not stop in time: killed", c.proc.pid)
                        c.proc.kill()
                    deadline = float("inf")
                # On a child's exit, not at the next of fixed steps (which kept a run's end up to
                # WATCH_S after its last child had gone).
                with contextlib.suppress(subprocess.TimeoutExpired):
                    running[0].proc.wait(timeout=WATCH_S)
        finally:
            self._done.set()
            for t in self._threads:
                t.join(timeout=5)
            self.reap()


def member_specs(n: int, owner: str, study: str, grid: list[int], base_url: str | None, settings: dict[str, object],
                 *, retry_errors: bool, replay: Any) -> list[MemberSpec]:
    """The parts of children 1..n-1 of a runner (`replay`: its `Replay`, or None)."""
    return [MemberSpec(runner_pid=os.getpid(), owner=f"{owner}/p{i}", index=i, processes=n, study=study, grid=grid,
                       base_url=base_url, run=settings, retry_errors=retry_errors,
                       replay=str(replay.source) if replay is not None else None,
                       replay_strict=bool(replay is not None and replay.strict)) for i in range(1, n)]


def check_member(run_dir: Path, member: MemberSpec) -> None:
    """A child joins only the run its runner is running now (the process that holds `runner.lock`)."""
    if lock_holder(run_dir) != str(member.runner_pid):
        raise UserError(f"{run_dir} is not being run by process {member.runner_pid}: a member process is "
                        "started by its runner (run.processes), never by hand", field="RUN_DIR")


def member_reporter(every_s: float = REPORT_S) -> tuple[ProgressHook, Callable[[Tally], None]]:
    """A child's progress hook (tally lines for its runner, throttled) and the final flush."""
    last = {"t": 0.0}
    lock = threading.Lock()

    def emit(t: Tally) -> None:
        line = json.dumps({"tally": {k: getattr(t, k) for k in TALLY_KEYS}})
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def hook(t: Tally, total: int) -> None:
        now = time.monotonic()
        if now - last["t"] >= every_s:
            last["t"] = now
            emit(t)

    return hook, emit


@contextlib.contextmanager
def watching_runner(runner_pid: int | None) -> Iterator[None]:
    """In a child: if its runner goes away (killed), drain as if it had forwarded a SIGTERM."""
    if runner_pid is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(WATCH_S * 5):
            if os.getppid() != runner_pid:
                log.warning("the runner (process %d) has gone: stopping", runner_pid)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    t = threading.Thread(target=watch, name="medpanel-runner-watch", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()


def stay_until_done(shared: Shared, missing: Callable[[], list[Pair]], release: Callable[[], object] | None,
                    poll_s: float) -> None:
    """Stay until every pair is done, helping with any that is free (other processes may have taken
    the grid's last shards, and pairs they hold are running there). `release` frees the claims of
    processes that are gone before each round.

    A round tries to claim every missing pair (a write each), so rounds come `poll_s` apart; in
    between, the missing pairs are only read, every `CHECK_S` or ten times as long as one read
    takes, so a process leaves within a fraction of a second of the last commit instead of at its
    next round."""
    while not shared.stop.is_set:
        todo = missing()
        if not todo:
            return
        if release is not None:
            release()
        with shared.lock:
            # The store's claims keep pairs exclusive; this set only saves queries.
            shared.taken.difference_update(todo)
        shared.pending = todo
        asyncio.run(Worker(shared).work([]))
        deadline = time.monotonic() + poll_s
        while True:
            t = time.monotonic()
            if not missing():
                return
            wait = min(max(CHECK_S, 10 * (time.monotonic() - t)), deadline - time.monotonic())
            if wait <= 0 or shared.stop.event.wait(wait):
                break
