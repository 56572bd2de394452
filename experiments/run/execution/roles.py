"""The three roles a process plays in a run: its runner, a member the runner started, a shared worker.

A session (`runner.py`) is the same work loop in every process; what differs is who owns the run
directory, and that is the role's to say, once, instead of a check of the mode at every step:

- `RunnerRole`: the process a user started on a run with its own SQLite storage. It holds the
  run's lock, writes status.json, releases what an earlier session left claimed, counts the
  earlier sessions in its tally, starts the embedded model server and the members of
  `run.processes` (`processes.Group`), and works through the shards still pending.
- `MemberRole`: a child process of a runner (`member.py`). It joins only the run its runner holds,
  under the runner's lock, with the runner's study, grid and model server; it writes no status and
  counts only its own session (its runner sums them); it drains if its runner goes away.
- `SharedRole`: a process on shared storage (PostgreSQL): a runner created there or a `medpanel
  worker` joining from any machine. It takes no lock (many workers on many machines are the point),
  opens the whole grid, and takes over claims older than `run.claim_timeout_s` (a dead worker's).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from medpanel.experiments.run.execution import processes
from medpanel.experiments.run.execution.study import member_study, new_study, shared_study
from medpanel.experiments.run.scenario.runspec import RunSpec
from medpanel.experiments.run.store.rundir import require_study
from medpanel.experiments.run.store.runlock import refuse_if_running, run_lock
from medpanel.experiments.run.store.store import Store

if TYPE_CHECKING:
    import optuna


class RunnerRole:
    """The run's own process on its own SQLite storage (see the module docstring)."""

    member: processes.MemberSpec | None = None
    writes_status = True
    """status.json is the runner's."""
    counts_prior = True
    """Earlier sessions' rows count in this process's tally (and its share of the error limit)."""
    index = 0
    """This process's index among the run's processes (`shares.py`)."""
    runner_pid: int | None = None
    """The runner a member watches (None: this process is no member)."""
    shared = False

    def processes(self, run: RunSpec) -> int:
        return run.processes

    def check_open(self, run_dir: Path, storage_url: str) -> None:
        refuse_if_running(run_dir)  # before the study: a stopped runner may hold its write lock
        require_study(run_dir, storage_url)  # opening would make an empty one: all redone

    def lock(self, run_dir: Path, owner: str) -> contextlib.AbstractContextManager[None]:
        """One runner per run directory on one machine (see `runlock`); a dead runner's lock is free."""
        return run_lock(run_dir, owner)

    def release_before(self, store: Store, owner: str, run: RunSpec) -> None:
        """Claims an earlier session left (a killed process's) are free again."""
        store.release_stale_claims(live_owners=[owner], older_than_s=None)

    def starts_members(self, n_processes: int) -> bool:
        return n_processes > 1

    def base_url(self, started: str | None) -> str | None:
        """The embedded server's URL: the one this process started, if any."""
        return started

    def starts_server(self) -> bool:
        return True

    def grid(self, n_shards: int, pending: list[int]) -> list[int]:
        """The shards of this session's study: those still pending (a resume opens a new study)."""
        return pending

    def trials(self, grid: list[int], pending: list[int]) -> int:
        return len(pending)

    def study(self, storage: optuna.storages.RDBStorage, grid: list[int]) -> optuna.Study:
        return new_study(storage, grid)

    def stays_until_done(self, n_processes: int) -> bool:
        """Others may hold the last pairs: stay and help until every pair is done."""
        return n_processes > 1

    def stale(self, store: Store, owner: str, run: RunSpec) -> Callable[[], object] | None:
        """What frees a dead process's claims while this one waits for the last pairs (the runner's
        `processes.Group` does it for its members)."""
        return None

    def watching(self) -> contextlib.AbstractContextManager[None]:
        """What watches this process's runner while it works (only a member has one to watch)."""
        return contextlib.nullcontext()


class MemberRole(RunnerRole):
    """A child process of a runner, with its part (`MemberSpec`) (see the module docstring)."""

    writes_status = False
    counts_prior = False

    def __init__(self, member: processes.MemberSpec) -> None:
        self.spec = member
        self.member = member
        self.index = member.index
        self.runner_pid = member.runner_pid

    def check_open(self, run_dir: Path, storage_url: str) -> None:
        processes.check_member(run_dir, self.spec)  # a child joins only the run its runner is running now

    def lock(self, run_dir: Path, owner: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # a member works under its runner's lock

    def release_before(self, store: Store, owner: str, run: RunSpec) -> None:
        pass  # its runner has released what was left before it

    def starts_members(self, n_processes: int) -> bool:
        return False

    def base_url(self, started: str | None) -> str | None:
        return self.spec.base_url  # the runner's embedded server, if it started one

    def starts_server(self) -> bool:
        return False

    def grid(self, n_shards: int, pending: list[int]) -> list[int]:
        return self.spec.grid  # the runner's study's: its GridSampler's search space must be the same

    def trials(self, grid: list[int], pending: list[int]) -> int:
        return len(grid)

    def study(self, storage: optuna.storages.RDBStorage, grid: list[int]) -> optuna.Study:
        return member_study(storage, grid, self.spec.study, self.spec.index)

    def watching(self) -> contextlib.AbstractContextManager[None]:
        return processes.watching_runner(self.spec.runner_pid)


class SharedRole(RunnerRole):
    """A process on shared storage: a runner created there, or a `medpanel worker` (see the module docstring)."""

    shared = True

    def processes(self, run: RunSpec) -> int:
        return 1  # shared storage has `medpanel worker`s instead of members

    def check_open(self, run_dir: Path, storage_url: str) -> None:
        pass  # many workers on many machines: no lock to refuse on, and the study is not a local file

    def lock(self, run_dir: Path, owner: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def release_before(self, store: Store, owner: str, run: RunSpec) -> None:
        # a claim older than claim_timeout_s is a dead worker's; younger ones may be running elsewhere
        store.release_stale_claims(live_owners=[owner], older_than_s=run.claim_timeout_s)

    def grid(self, n_shards: int, pending: list[int]) -> list[int]:
        return list(range(n_shards))  # every worker opens the one study with the whole grid

    def study(self, storage: optuna.storages.RDBStorage, grid: list[int]) -> optuna.Study:
        return shared_study(storage, grid)

    def stays_until_done(self, n_processes: int) -> bool:
        return True

    def stale(self, store: Store, owner: str, run: RunSpec) -> Callable[[], object] | None:
        return functools.partial(store.release_stale_claims, [owner], run.claim_timeout_s)
