"""Processes as the tests watch them: alive (a zombie has ended), their children, waiting for them
to go, and a stand-in llama-server program for the launcher and the pool."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from medpanel.agents.model.llama_server import BINARY_ENV


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie has ended, only its exit status is left to read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z"


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def still_alive_after(pids: list[int], within_s: float) -> list[int]:
    """Waits up to `within_s` for every pid to end; returns the ones still running."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# A stand-in for llama-server: prints a version line for --version; exits with FAKE_EXIT if set;
# appends its arguments to FAKE_ARGS (one JSON line a start); answers /health with 503 twice (the
# model "loading"), then 200 with the number of polls.
FAKE_LLAMA_SERVER = r'''#!{python}
import http.server, json, os, sys
if "--version" in sys.argv:
    print("version: 4242 (fakecommit)")
    sys.exit(0)
if os.environ.get("FAKE_EXIT"):
    print("fake llama-server: failing on purpose", file=sys.stderr, flush=True)
    sys.exit(int(os.environ["FAKE_EXIT"]))
with open(os.environ["FAKE_ARGS"], "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
port = int(sys.argv[sys.argv.index("--port") + 1])
polls = []

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        polls.append(self.path)
        code = 503 if self.path == "/health" and polls.count("/health") <= 2 else 200
        body = json.dumps({{"status": "ok" if code == 200 else "loading model", "polls": len(polls)}}).encode()
        self.send_response(code)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        print("fake llama-server:", self.path, file=sys.stderr, flush=True)

print("fake llama-server: listening", file=sys.stderr, flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def install_fake_llama_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Puts the stand-in where the launcher looks first; its starts' arguments go to args.jsonl."""
    program = tmp_path / "llama-server"
    program.write_text(FAKE_LLAMA_SERVER.format(python=sys.executable))
    program.chmod(0o755)
    monkeypatch.setenv(BINARY_ENV, str(program))
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args.jsonl"))
    return program
