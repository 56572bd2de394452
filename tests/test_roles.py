"""The three roles a process plays in a run (experiments/run/execution/roles.py), each decision once.

The shared worker's role runs only against PostgreSQL in the end-to-end tests (skipped without a
server), so what it decides is checked here on its own, beside the runner's and a member's.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.run.execution.processes import MemberSpec
from medpanel.experiments.run.execution.roles import MemberRole, RunnerRole, SharedRole
from medpanel.experiments.run.scenario.runspec import RunSpec

RUN = RunSpec(processes=3, claim_timeout_s=120.0)
SPEC = MemberSpec(runner_pid=4242, owner="host:1:abc/p2", index=2, processes=3, study="medpanel-resume-1",
                  grid=[0, 2, 5], base_url="http://127.0.0.1:9000/v1", run={})


class FakeStore:
    def __init__(self) -> None:
        self.released: list[tuple[Any, ...]] = []

    def release_stale_claims(self, live_owners: list[str], older_than_s: float | None = None) -> None:
        self.released.append((tuple(live_owners), older_than_s))


def test_the_runner_owns_its_directory_and_works_through_what_is_pending(tmp_path: Path) -> None:
    role, store = RunnerRole(), FakeStore()
    assert role.processes(RUN) == 3 and role.starts_members(3) and not role.starts_members(1)
    assert role.writes_status and role.counts_prior and role.index == 0 and role.member is None
    assert role.starts_server() and role.base_url("http://server") == "http://server"
    assert role.grid(6, [1, 4]) == [1, 4] and role.trials([1, 4], [1, 4]) == 2
    role.release_before(store, "me", RUN)  # every claim an earlier session left, whatever its age
    assert store.released == [(("me",), None)]
    assert role.stays_until_done(3) and not role.stays_until_done(1)
    assert role.stale(FakeStore(), "me", RUN) is None  # its Group frees a dead member's claims
    assert not isinstance(role.lock(tmp_path, "me"), contextlib.nullcontext)


def test_a_member_joins_its_runner_and_counts_only_its_own_session(tmp_path: Path) -> None:
    role, store = MemberRole(SPEC), FakeStore()
    assert role.member is SPEC and role.index == 2 and role.runner_pid == 4242
    assert not role.writes_status and not role.counts_prior
    assert not role.starts_members(3) and not role.starts_server()
    assert role.base_url(None) == "http://127.0.0.1:9000/v1"  # the runner's embedded server
    assert role.grid(6, [1, 4]) == [0, 2, 5] and role.trials([0, 2, 5], [1, 4]) == 3  # the runner's study
    role.release_before(store, "me", RUN)
    assert store.released == []  # its runner released what was left before it
    assert isinstance(role.lock(tmp_path, "me"), contextlib.nullcontext)  # under its runner's lock
    with pytest.raises(Exception, match="is not being run by process 4242"):
        role.check_open(tmp_path, "sqlite:///x")  # no runner holds this directory


def test_a_shared_worker_takes_no_lock_opens_the_whole_grid_and_takes_over_old_claims(tmp_path: Path) -> None:
    role, store = SharedRole(), FakeStore()
    assert role.shared and role.processes(RUN) == 1 and not role.starts_members(role.processes(RUN))
    assert role.writes_status and role.counts_prior
    assert role.grid(4, [1]) == [0, 1, 2, 3] and role.trials([0, 1, 2, 3], [1]) == 1
    role.release_before(store, "me", RUN)
    assert store.released == [(("me",), 120.0)]  # younger claims may be running on another machine
    stale = role.stale(store, "me", RUN)
    assert stale is not None and role.stays_until_done(1)
    stale()
    assert store.released[-1] == (("me",), 120.0)
    assert isinstance(role.lock(tmp_path, "me"), contextlib.nullcontext)
    role.check_open(tmp_path / "nowhere", "postgresql://h/db")  # nothing local to check
