"""`--processes N`: every bound is checked before any child starts, and a child never outlives the
process that started it, whatever ends that one (a SIGKILL included). Real subprocesses and signals;
/proc tells which processes are alive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution import children, tether
from medpanel.experiments.run.scenario.runspec import MAX_PROCESSES, planned

from .conftest import write
from .proc_helpers import alive, children_of

pytestmark = pytest.mark.timeout(180)

SCENARIO = """name: s
pipeline: generalist
flags: {{c: [0]}}
dataset: {{source: sample, limit: 1}}
model: {{backend: scripted}}
run: {{workers: 1, processes: {n}}}
"""


def _members_of(runner: int) -> list[int]:
    """Live processes started as children of `runner` (their environment names it)."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            raw = env.read_bytes()
        except OSError:
            continue
        if f"{tether.RUNNER_PID_ENV}={runner}".encode() in raw.split(b"\0") or (
                b"medpanel.experiments.run.execution.member" in _cmdline(env.parent) and _ppid(env.parent) == runner):
            pid = int(env.parent.name)
            if alive(pid):
                found.append(pid)
    return found


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _ppid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# -- the bound, before anything starts ------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, -1000, MAX_PROCESSES + 1, 1000, 10**30])
def test_a_process_count_out_of_bounds_is_refused_before_reading_anything(n: int) -> None:
    with pytest.raises(UserError) as err:
        planned(Path("/nonexistent.yaml"), None, None, processes=n)
    assert str(err.value).startswith("--processes:") and f"1 to {MAX_PROCESSES}" in str(err.value)


@pytest.mark.parametrize("n", [1, 2, MAX_PROCESSES])
def test_a_count_within_bounds_is_taken(n: int) -> None:
    assert planned(None, None, None, processes=n).run.process_count == n


@pytest.mark.parametrize("value", ["0", "-3", str(MAX_PROCESSES + 1), "1000", "1e9", "x", ""])
def test_a_scenario_or_set_count_out_of_bounds_starts_no_child_ahead(tmp_path: Path, value: str) -> None:
    """Out of bounds in the file or in --set: the guess is 1 (no child ahead); validation names it."""
    sc = write(tmp_path / "s.yaml", SCENARIO.format(n=value or "null"))
    assert planned(sc, None, None).run.process_count == 1
    assert planned(sc, None, [f"run.processes={value}"]).run.process_count == 1


def test_the_scenario_bound_is_the_same_constant() -> None:
    from medpanel.experiments.run.scenario.runspec import RunSpec

    RunSpec(processes=MAX_PROCESSES)
    with pytest.raises(ValueError):
        RunSpec(processes=MAX_PROCESSES + 1)


def test_no_more_children_start_ahead_than_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Path | None] = []

    def launch(run_dir: Path | None = None, pipeline: str | None = None) -> None:
        started.append(run_dir)

    monkeypatch.setattr(children, "launch", launch)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    children.prestart(MAX_PROCESSES - 1)
    children._started.clear()
    assert len(started) == 3


@pytest.mark.parametrize("args", [["--processes", "1000"], ["--processes", "0"], ["--processes", "65"],
                                  ["--set", "run.processes=1000"]])
def test_medpanel_run_refuses_a_count_and_leaves_no_interpreter(tmp_path: Path, args: list[str]) -> None:
    """The reported case: --processes 1000 started 999 interpreters before checking 1000."""
    sc = write(tmp_path / "s.yaml", SCENARIO.format(n=1))
    proc = subprocess.Popen([sys.executable, "-m", "medpanel", "run", str(sc), "--quiet", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    seen: set[int] = set()
    while proc.poll() is None:
        seen.update(_members_of(proc.pid))
        time.sleep(0.05)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and "processes" in err and "Traceback" not in err, err
    assert not seen, f"children started before the count was checked: {sorted(seen)}"
    assert not _members_of(proc.pid)


# -- the ties: a child ends with its runner ----------------------------------------------------------

STUB = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, lambda s, f: os._exit(3))
    from medpanel.experiments.run.execution import tether
    if sys.argv[1] == "no-deathsig":
        tether.death_signal = lambda signum: False
    if sys.argv[1] == "no-lifeline":
        os.environ.pop(tether.LIFELINE_ENV, None)
    tether.hold()
    print("ready", flush=True)
    time.sleep(120)
""")

PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    from medpanel.experiments.run.execution import tether
    kids = [subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=tether.child_env(),
                             pass_fds=(tether.lifeline(),), stdout=subprocess.PIPE, text=True,
                             start_new_session=True) for _ in range(3)]
    for k in kids:
        assert k.stdout.readline().strip() == "ready"
    print(" ".join(str(k.pid) for k in kids), flush=True)
    if sys.argv[3] == "exit":
        os._exit(0)
    if sys.argv[3] == "raise":
        raise SystemExit(1)
    time.sleep(120)
""")


def _family(mode: str) -> tuple[subprocess.Popen[str], list[int]]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, STUB, mode, "wait"], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    kids = [int(x) for x in line.split()]
    assert len(kids) == 3 and all(alive(k) for k in kids)
    return parent, kids


@pytest.mark.parametrize("mode", ["both", "no-deathsig", "no-lifeline"])
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSEGV])
def test_children_end_with_their_parent_however_it_ends(mode: str, how: signal.Signals) -> None:
    """Each tie alone is enough (the kernel's death signal on Linux, the lifeline pipe anywhere)."""
    parent, kids = _family(mode)
    os.kill(parent.pid, how)
    parent.wait(timeout=30)
    left = _wait_gone(kids, 10)
    for k in left:
        os.kill(k, signal.SIGKILL)
    assert not left, f"{len(left)} of 3 children outlived their parent ({mode}, {how.name})"


@pytest.mark.parametrize("end", ["exit", "raise"])
def test_children_end_when_their_parent_exits_by_itself(end: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, STUB, "both", end], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    kids = [int(x) for x in parent.stdout.readline().split()]
    parent.wait(timeout=30)
    left = _wait_gone(kids, 10)
    for k in left:
        os.kill(k, signal.SIGKILL)
    assert len(kids) == 3 and not left


def test_a_child_whose_parent_died_before_it_tied_itself_ends() -> None:
    """The parent is gone before `hold()` runs: the child notices its parent changed and ends."""
    env = {**os.environ, tether.RUNNER_PID_ENV: "1"}  # not its parent
    done = subprocess.run([sys.executable, "-c", STUB, "no-lifeline"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3 and "ready" not in done.stdout


def test_a_process_not_started_by_a_runner_holds_no_tie() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDPANEL_RUNNER") and "LIFELINE" not in k}
    code = "from medpanel.experiments.run.execution import tether; tether.hold(); print('alive')"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "alive"


def test_the_lifeline_is_not_inherited_by_other_children() -> None:
    """Only the read end travels (pass_fds); the write end stays with the runner alone, or a child
    holding it would keep every other child's lifeline open."""
    read_end = tether.lifeline()
    write_end = tether._lifeline[1] if tether._lifeline else -1
    assert not os.get_inheritable(read_end) and not os.get_inheritable(write_end)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_real_member_started_ahead_ends_with_a_killed_runner_at_once(how: signal.Signals) -> None:
    """`children.launch`: the member imports the runner for seconds before it reads its part; a runner
    killed meanwhile used to leave it importing, then waiting. Now it ends within a second or two."""
    code = ("import time; from medpanel.experiments.run.execution import children; p = children.launch(); "
            "print(p.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    kid = int(parent.stdout.readline())
    time.sleep(0.3)  # the member is importing the runner now (seconds of CPU)
    assert alive(kid)
    os.kill(parent.pid, how)
    parent.wait(timeout=30)
    left = _wait_gone([kid], 3)
    for k in left:
        os.kill(k, signal.SIGKILL)
    assert not left, "the member outlived its runner"


def test_a_runner_killed_mid_run_leaves_no_child_and_a_resume_finishes(tmp_path: Path) -> None:
    """A real `medpanel run` with two processes, both at work, SIGKILLed: its child stops at once
    (it drains what it holds, claims nothing more) and a resume completes every pair once."""
    from .test_processes import PAIRS, Endpoint, _cli, _integrity, _owners, _query, _scenario, _wait_for

    run_dir = tmp_path / "run"
    with Endpoint(latency_ms=300) as endpoint:
        endpoint.hold_for = run_dir
        proc = _cli(str(_scenario(tmp_path, endpoint.base_url, 2)), "--run-dir", str(run_dir))
        _wait_for(lambda: _owners(run_dir) >= 2)
        kids = children_of(proc.pid)
        assert len(kids) == 1, kids
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        left = _wait_gone(kids, 60)
        for k in left:
            os.kill(k, signal.SIGKILL)
        assert not left, "the child outlived its killed runner"
        resumed = _cli("--resume", str(run_dir))
        out, _ = resumed.communicate(timeout=600)
        assert resumed.returncode == 0, out
    _integrity(run_dir)
    done = _query(run_dir, "select condition, dataset, qid, repeat from mp_results")
    assert len(done) == len(set(done)) == PAIRS
