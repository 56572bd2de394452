"""Run a native server program in place of this process, watched so that it dies with the runner.

`python -m medpanel.agents.model.watch_exec --parent PID -- PROGRAM ARGS...`

`serve_child` can keep a watchdog thread inside llama-cpp-python's server because that server is
Python; a compiled server such as `llama-server` cannot host one. So this process forks a small
watchdog and then becomes the server with `exec`: the pid the runner started is the server's own,
and the runner's `stop()` signals the server directly. The watchdog polls the runner; when the
runner is gone (even by SIGKILL, which runs no cleanup) it SIGKILLs the server within half a
second, instead of leaving it to hold a port and both cores. It exits as soon as the server does.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_S = 0.25


def runner_gone(pid: int) -> bool:
    """True once `pid` no longer runs: no such process, or a zombie its own parent has not reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            # The state follows the parenthesised command name, which may itself hold spaces.
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        # Without /proc (macOS) a zombie cannot be told apart; with it, the process just ended.
        return os.path.isdir("/proc")
    except (OSError, IndexError):
        return False


def _watch(runner: int, server: int) -> None:
    while True:
        if os.getppid() != server:
            os._exit(0)  # re-parented: the server has exited on its own
        if runner_gone(runner):
            try:
                os.kill(server, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os._exit(0)
        time.sleep(POLL_S)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 4 or args[0] != "--parent" or args[2] != "--":
        sys.exit("usage: python -m medpanel.agents.model.watch_exec --parent PID -- PROGRAM [ARGS...]")
    runner, program = int(args[1]), args[3]
    if not os.access(program, os.X_OK):
        sys.exit(f"watch_exec: {program} is not an executable file")
    server = os.getpid()
    if os.fork() == 0:
        # The watchdog must not react to signals meant for the server (the runner's terminate()).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _watch(runner, server)
    os.execv(program, [program, *args[4:]])


if __name__ == "__main__":
    main()
