"""A child process ends with the process that started it, whatever ends that one (SIGKILL included).

A runner's children (`run.processes`) run in their own sessions, so a terminal's Ctrl-C reaches the
runner only (it forwards one of its own). Without a tie a killed runner would leave them running:
the first thing a child does, before its imports, is `hold()` two ties to its runner:

- **Linux**: `prctl(PR_SET_PDEATHSIG, SIGTERM)` through ctypes: the kernel signals the child the moment
  its parent dies. Set by the child itself, it then checks that its parent is still the runner that
  started it (`RUNNER_PID_ENV`), as the parent may have died before the call.
- **Everywhere** (the portable fallback, and the tie that needs no kernel feature): a lifeline pipe.
  The runner holds the write end (never inherited: Python's descriptors are not, and `launch` passes
  only the read end); a thread of the child blocks reading the read end. However the runner ends,
  the kernel closes its end, the read returns, and the child sends itself SIGTERM.

SIGTERM is the signal a runner forwards: before its session a child exits at once (member.py); in
its session it drains as after a forwarded SIGTERM (claims nothing more, ends within its grace
period, exit 3; a resume redoes what it held).

This module imports nothing of medpanel's: a child holds its ties before any other import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

RUNNER_PID_ENV = "MEDPANEL_RUNNER_PID"
"""The runner's process id, in a child's environment."""
LIFELINE_ENV = "MEDPANEL_LIFELINE_FD"
"""The read end of the runner's lifeline pipe, in a child's environment."""
PR_SET_PDEATHSIG = 1
"""linux/prctl.h."""

_lifeline: tuple[int, int] | None = None


def lifeline() -> int:
    """The read end of this process's lifeline (made once; its write end is held until this process
    ends). Children are handed it with `pass_fds`."""
    global _lifeline
    if _lifeline is None:
        _lifeline = os.pipe()  # both ends non-inheritable: only `pass_fds` hands the read end on
    return _lifeline[0]


def child_env() -> dict[str, str]:
    """The environment of a child: this process's, plus where its ties are."""
    return {**os.environ, RUNNER_PID_ENV: str(os.getpid()), LIFELINE_ENV: str(lifeline())}


def death_signal(signum: int) -> bool:
    """Ask the kernel to send `signum` to this process when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(fd: int) -> None:
    try:
        while os.read(fd, 1):  # the runner never writes: any return is its end closing
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def hold() -> None:
    """In a child: end (SIGTERM) when the runner that started it ends. Nothing to do in a process
    that was not started by a runner (no ties in its environment)."""
    runner = os.environ.pop(RUNNER_PID_ENV, "")
    fd = os.environ.pop(LIFELINE_ENV, "")
    if runner.isdigit():
        death_signal(signal.SIGTERM)
        if os.getppid() != int(runner):  # it died before the tie was made
            os.kill(os.getpid(), signal.SIGTERM)
    if fd.isdigit():
        threading.Thread(target=_watch, args=(int(fd),), name="medpanel-lifeline", daemon=True).start()
