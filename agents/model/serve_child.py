"""Run llama-cpp-python's OpenAI-compatible server, and exit when the parent process is gone.

`python .../serve_child.py --parent PID -- <llama_cpp.server args>`, run as a file so that it imports
nothing of medpanel. A watchdog thread polls the parent; when the runner dies (even by SIGKILL,
which runs no cleanup) the server exits within a second instead of holding a port and two cores.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Callable


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
        sys.exit("usage: python serve_child.py --parent PID -- <server args>")
    pid = int(args[1])
    # Run as a file, this folder is sys.path[0]: its modules (cache.py, client.py ...) must not shadow
    # top-level modules the server imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    threading.Thread(target=_watch, args=(pid,), daemon=True).start()
    sys.argv = ["llama_cpp.server", *args[3:]]
    # Looked up by name so the check is the same whether or not llama-cpp-python (untyped) is
    # installed where mypy runs.
    server = importlib.import_module("llama_cpp.server.__main__")
    serve: Callable[[], None] = server.main
    serve()


if __name__ == "__main__":
    main()
