"""Run llama-cpp-python's OpenAI-compatible server, and exit when the parent process is gone.

`python -m medpanel.agents.model.serve_child --parent PID -- <llama_cpp.server args>`. A watchdog thread
polls the parent; when the runner dies (even by SIGKILL, which runs no cleanup) the server exits
within a second instead of holding a port and two cores forever.
"""

from __future__ import annotations

import os
import sys
import threading
import time


def _parent_alive(pid: int) -> bool:
    if os.getppid() != pid:
        return False  # re-parented: the original parent is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(pid: int) -> None:
    while _parent_alive(pid):
        time.sleep(0.5)
    os._exit(0)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--parent" or args[2] != "--":
        sys.exit("usage: python -m medpanel.agents.model.serve_child --parent PID -- <server args>")
    pid = int(args[1])
    threading.Thread(target=_watch, args=(pid,), daemon=True).start()
    sys.argv = ["llama_cpp.server", *args[3:]]
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
