"""`medpanel view` against hostile clients and a planted report folder, with real sockets and links.

The server is the real CLI command in a process of its own, so what it prints (a traceback per
broken client, say) and how fast it stops on Ctrl-C are measured as a user meets them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from medpanel.experiments.view.viewer import build_site

from .inspect_fixtures import GRID_QUESTIONS, grid_run

VIEW = [sys.executable, "-m", "medpanel", "view"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = grid_run(tmp_path_factory.mktemp("hostile-view"), questions=GRID_QUESTIONS[:1], name="hv")
    build_site(run_dir, plots=False, n_boot=200)
    return run_dir


class Served:
    """`medpanel view RUN` in a subprocess: its port, and everything it printed once stopped."""

    def __init__(self, run_dir: Path, log: Path) -> None:
        self.log = log
        self._out = open(log, "w+", encoding="utf-8")
        self.proc = subprocess.Popen([*VIEW, str(run_dir), "--port", "0"],
                                     stdout=self._out, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while True:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text(encoding="utf-8"))
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"view did not start: {log.read_text(encoding='utf-8')}")
            time.sleep(0.1)

    def raw(self, request: bytes, timeout: float = 10) -> bytes:
        """Send `request` verbatim and read the whole answer."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(request)
            chunks = []
            while True:
                try:
                    b = s.recv(65536)
                except (ConnectionResetError, TimeoutError):
                    break
                if not b:
                    break
                chunks.append(b)
        return b"".join(chunks)

    def get(self, path: bytes) -> int:
        answer = self.raw(b"GET " + path + b" HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        m = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
        assert m, f"no HTTP status for {path!r}: {answer[:200]!r}"
        return int(m.group(1))

    def body(self, path: bytes) -> bytes:
        return self.raw(b"GET " + path + b" HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")

    def stop(self) -> float:
        """Ctrl-C, and the seconds until the server stopped listening (the process then has 30 s to
        be gone: what follows is the interpreter's own teardown, seconds on a loaded machine)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        closed = None
        while closed is None and time.monotonic() - start < 60:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                time.sleep(0.05)
            except OSError:
                closed = time.monotonic() - start
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("view was still running 30 s after it stopped listening") from None
        finally:
            self._out.close()
        assert closed is not None, "view still listened 60 s after Ctrl-C"
        return closed

    def printed(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def served(built: Path, tmp_path: Path) -> Iterator[Served]:
    s = Served(built, tmp_path / "view.log")
    try:
        yield s
    finally:
        if s.proc.poll() is None:
            s.stop()


# -- half-open and aborted clients -------------------------------------------------------------


def test_half_open_clients_print_nothing_and_ctrl_c_stops_at_once(served: Served) -> None:
    held = []
    for n in range(120):
        s = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        if n % 3 == 1:
            s.sendall(b"GET /index.html HT")  # a request line never finished
        elif n % 3 == 2:
            s.sendall(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
        held.append(s)
    try:
        assert served.get(b"/index.html") == 200  # an honest client is still served beside them
        took = served.stop()
    finally:
        for s in held:
            s.close()
    assert took < 3, f"Ctrl-C took {took:.1f} s to stop the server with 120 half-open clients"
    assert "Traceback" not in served.printed(), served.printed()[-3000:]


def test_clients_that_reset_mid_answer_print_no_traceback(served: Served) -> None:
    for _ in range(30):
        s = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        s.sendall(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close = RST
        s.close()
    for _ in range(10):  # connect and go away without a word
        socket.create_connection(("127.0.0.1", served.port), timeout=10).close()
    time.sleep(0.5)
    assert served.get(b"/index.html") == 200
    served.stop()
    assert "Traceback" not in served.printed(), served.printed()[-3000:]


def test_a_client_that_never_reads_does_not_hold_ctrl_c(served: Served) -> None:
    s = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # A pipeline of requests whose answers are never read. The server may drop such a client before
    # the last request is sent (a reset on a loaded machine): what is tested is how fast it stops.
    with contextlib.suppress(ConnectionResetError, BrokenPipeError):
        for _ in range(50):
            s.sendall(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    try:
        time.sleep(0.3)
        took = served.stop()
    finally:
        s.close()
    assert took < 3, f"Ctrl-C took {took:.1f} s to stop the server behind a client that reads nothing"
    assert "Traceback" not in served.printed()


# -- malformed requests ----------------------------------------------------------------------------


MALFORMED = [
    b"/index%00.html", b"/%00", b"/questions/%00../../run.json", b"/index.html%00.png", b"/%ff%fe",
    b"/%zz", b"/" + b"a" * 5000, b"/..%2f..%2frun.json", b"/%2e%2e/run.json", b"/questions/..%5c..%5crun.json",
    b"//etc/passwd", b"/index.html/..", b"/\xff\xfe.html", b"/%c0%ae%c0%ae/run.json",
]


def test_malformed_urls_get_an_error_status_and_no_traceback(served: Served) -> None:
    wrong = {}
    for path in MALFORMED:  # one server for all: each start costs seconds
        code = served.get(path)
        if code not in (400, 404, 414):
            wrong[path] = code
    assert wrong == {}
    assert served.get(b"/index.html") == 200
    served.stop()
    assert "Traceback" not in served.printed(), served.printed()[-3000:]


def test_a_raw_nul_and_garbage_request_lines_get_400(served: Served) -> None:
    for line in (b"GET /index\x00.html HTTP/1.0\r\n\r\n", b"\x00\x01\x02\r\n\r\n", b"GET\r\n\r\n",
                 b"GET /index.html HTTP/9.9\r\n\r\n", b"GET /index.html HTTP/1.0 extra\r\n\r\n"):
        answer = served.raw(line)
        assert re.match(rb"HTTP/1\.[01] (400|404|505)", answer), (line, answer[:120])
    served.stop()
    assert "Traceback" not in served.printed(), served.printed()[-3000:]


# -- links planted in the served folder -------------------------------------------------------------


def plant(report: Path, outside: Path) -> list[Path]:
    """Links in the report folder: to a secret outside, to /etc/passwd, to a folder outside, to a
    page inside, up to run.json, to nothing; a FIFO; a hard link to the secret."""
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("SECRET-OUTSIDE", encoding="utf-8")
    made = [report / "secret.txt", report / "passwd.html", report / "outdir", report / "again.html",
            report / "questions" / "up.html", report / "dangling.html"]
    targets: list[str | Path] = [outside / "secret.txt", "/etc/passwd", outside, "index.html", "../../run.json",
                                 outside / "nothing-here"]
    for link, target in zip(made, targets, strict=True):
        os.symlink(target, link)
    os.mkfifo(report / "pipe.html")  # opened for reading, a FIFO would hang the handler
    os.link(outside / "secret.txt", report / "hard.html")  # a regular file, but the secret's own inode
    return [*made, report / "pipe.html", report / "hard.html"]


PLANTED = [b"/secret.txt", b"/passwd.html", b"/outdir/secret.txt", b"/outdir/", b"/again.html",
           b"/questions/up.html", b"/dangling.html", b"/pipe.html", b"/hard.html"]


def test_links_planted_while_serving_are_never_served(served: Served, built: Path, tmp_path: Path) -> None:
    made = plant(built / "report", tmp_path / "outside")
    try:
        served_anyway = {}
        for path in PLANTED:
            answer = served.body(path)
            if not re.match(rb"HTTP/1\.[01] 404", answer) or any(
                    s in answer for s in (b"SECRET-OUTSIDE", b"root:", b"run_id")):
                served_anyway[path] = answer[:120]
        assert served_anyway == {}
        assert served.get(b"/index.html") == 200
    finally:
        served.stop()
        for p in made:
            p.unlink()
    assert "Traceback" not in served.printed()


def test_a_link_planted_before_start_is_refused_in_one_line(built: Path, tmp_path: Path) -> None:
    made = plant(built / "report", tmp_path / "outside")
    try:
        res = subprocess.run([*VIEW, str(built), "--port", "0"], capture_output=True, text=True, timeout=120)
    finally:
        for p in made:
            p.unlink()
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "link" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_report_folder_that_is_itself_a_link_is_refused(built: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (built / "report").rename(elsewhere)
    os.symlink(elsewhere, built / "report")
    try:
        res = subprocess.run([*VIEW, str(built), "--port", "0"],
                             capture_output=True, text=True, timeout=60)
    finally:
        (built / "report").unlink()
        elsewhere.rename(built / "report")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "report" in res.stderr
