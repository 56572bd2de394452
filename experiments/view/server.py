"""Serving a run's report read-only on 127.0.0.1: files under the report folder, and the live view.

Only regular files reached from the report folder without following a link are served: each path
is walked one name at a time on directory descriptors opened with O_NOFOLLOW, so a link planted
anywhere in `report/` (to a secret, to a folder outside, even to a page inside) is a 404, as is
`..`, a NUL, a URL that does not decode, a FIFO, a folder or a hard link. No listings, no other
methods (501).

A client that connects and says nothing, stops mid-request, never reads its answer or resets the
connection costs one daemon thread for at most `CLIENT_TIMEOUT_S` and prints nothing; Ctrl-C
stops the server at once whatever the clients are doing.
"""

from __future__ import annotations

import email.utils
import functools
import json
import mimetypes
import os
import socket
import stat
import sys
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote_to_bytes

from medpanel.experiments.errors import UserError

CLIENT_TIMEOUT_S = 10.0
"""How long a client may take to send a request or read an answer before its connection is closed."""

LiveRoute = Callable[[str], "tuple[int, str, bytes] | None"]
"""The live view's answer to a path: (status, content type, body), or None to serve the file."""


def served_parts(raw_path: str) -> tuple[str, ...] | None:
    """The names a request path walks from the report folder (`index.html` for `/`), or None when
    the path is not one this server serves: a NUL, an undecodable escape, `..`, a name too long,
    a folder (trailing slash)."""
    path = raw_path.split("?", 1)[0].split("#", 1)[0]
    try:
        text = unquote_to_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\x00" in text or "\\" in text:
        return None
    if text in ("", "/"):
        return ("index.html",)
    if text.endswith("/"):
        return None  # a folder: no listings
    parts = tuple(p for p in text.split("/") if p not in ("", "."))
    if not parts or any(p == ".." or len(p.encode()) > 255 for p in parts):
        return None
    return parts


def open_served(root: Path, parts: tuple[str, ...]) -> BinaryIO | None:
    """The regular file at `root/parts`, opened without following any link on the way; None for a
    link, a missing name, a folder, a FIFO, a device or a file with other names (a hard link: the
    report's builder writes each file under one name). Nothing is read before it is checked."""
    flags_dir = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, flags_dir)
    except OSError:
        return None
    try:
        for name in parts[:-1]:
            child = os.open(name, flags_dir, dir_fd=fd)
            os.close(fd)
            fd = child
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    st = os.fstat(leaf)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a hard link may be a file from anywhere
        os.close(leaf)
        return None
    os.set_blocking(leaf, True)
    return os.fdopen(leaf, "rb")


class ReadOnlyHandler(SimpleHTTPRequestHandler):
    """GET and HEAD of regular files under the report folder (and the live view's routes)."""

    server_version = "medpanel-view"
    default_request_version = "HTTP/1.0"  # a garbled request line still gets a status line, not a bare page
    timeout = CLIENT_TIMEOUT_S  # a half-open client is dropped, never waited on forever
    live: LiveRoute | None = None

    def __init__(self, *args: Any, directory: str, live: LiveRoute | None = None, **kwargs: Any) -> None:
        self.live = live
        super().__init__(*args, directory=directory, **kwargs)

    def _host_allowed(self) -> bool:
        """DNS rebinding: a page from another site may point its own name at 127.0.0.1; its requests
        then carry that name as Host. Only the loopback names this server is reached by pass."""
        host = (self.headers.get("Host") or "").strip().lower()
        name = host[:host.index("]") + 1] if host.startswith("[") and "]" in host else host.rsplit(":", 1)[0]
        return name in ("127.0.0.1", "localhost", "[::1]")

    def do_GET(self) -> None:
        f = self._head()
        if f is not None:
            try:
                self.copyfile(f, self.wfile)
            finally:
                f.close()

    def do_HEAD(self) -> None:
        f = self._head()
        if f is not None:
            f.close()

    def _head(self) -> BinaryIO | None:
        if "\x00" in self.path:
            self.send_error(400, "Bad request: a NUL in the URL")
            return None
        if not self._host_allowed():
            self.send_error(403, "Host not allowed: open the report at http://127.0.0.1:PORT/")
            return None
        parts = served_parts(self.path)
        if parts is None:
            self.send_error(404, "File not found")
            return None
        if self.live is not None:
            answer = self.live("/".join(parts))
            if answer is not None:
                self._send_bytes(*answer)
                return None
        f = open_served(Path(self.directory), parts)
        if f is None:
            self.send_error(404, "File not found")
            return None
        size = os.fstat(f.fileno()).st_size
        self.send_response(200)
        self.send_header("Content-Type", mimetypes.guess_type(parts[-1])[0] or "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("Last-Modified", email.utils.formatdate(os.fstat(f.fileno()).st_mtime, usegmt=True))
        self.end_headers()
        return f

    def _send_bytes(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_head(self) -> Any:  # the base class's path (translate_path, listings) is never taken
        return self._head()

    def list_directory(self, path: object) -> None:
        self.send_error(404, "No directory listings")
        return None

    def end_headers(self) -> None:
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    """One daemon thread per client, never joined: Ctrl-C does not wait for a client that went
    quiet. A client that goes away (reset, broken pipe, timeout) is its own business and prints
    nothing; any other failure of one request is one line on stderr, not a traceback."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError | socket.timeout):
            return
        sys.stderr.write(f"view: a request failed ({type(exc).__name__}: {exc}); the server goes on\n")


def make_server(report_dir: Path, port: int = 0, host: str = "127.0.0.1", *,
                live: LiveRoute | None = None) -> ThreadingHTTPServer:
    """A server for `report_dir` bound to localhost; port 0 picks a free port (see server_address).
    A report folder that is a link, or not a folder, is refused in one line."""
    report_dir = Path(report_dir)
    if report_dir.is_symlink() or (report_dir.exists() and not report_dir.is_dir()):
        raise UserError("is a link or not a folder: the viewer serves only the run's own report folder. "
                        "Remove it and rebuild with medpanel view --rebuild", file=str(report_dir))
    handler = functools.partial(ReadOnlyHandler, directory=str(report_dir.absolute()), live=live)
    return QuietServer((host, port), handler)


def json_answer(doc: Any) -> tuple[int, str, bytes]:
    return 200, "application/json; charset=utf-8", json.dumps(doc, ensure_ascii=False).encode()


# The types a report folder holds, whatever the system's mime tables say.
mimetypes.add_type("image/svg+xml", ".svg")
mimetypes.add_type("text/html", ".html")
mimetypes.add_type("application/json", ".json")
