"""The package's other HTTP reads are bounded like a model's: the web search backend (Tavily) and the
embedded server's health check. Real local servers that misbehave; each read ends with an error
naming the bound (or, for the health check, without reading the body at all)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from aiohttp import web

from medpanel.agents.model.local_server import ServerProcess, free_port
from medpanel.retrieval.errors import SearchBackendError
from medpanel.retrieval.search import TavilySearch

from .hostile_server import Hostile, drip, gzip_bomb, reply_json


async def _bomb(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return await gzip_bomb(request, inflated=64 * 2**20)


async def _drip(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return await drip(request, every_s=0.2, limit_s=120)


async def _deep(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return reply_json(b"[" * 20_000 + b"]" * 20_000)


async def _latin1(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return reply_json(json.dumps({"results": [{"url": "https://x.org", "title": "caf\u00e9"}]},
                                 ensure_ascii=False).encode("latin-1"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("behave", "words"), [
    (_bomb, "over 8,388,608 bytes (decompressed)"),
    (_drip, "no whole reply from"),
    (_deep, "nests its JSON deeper than it can be read"),
    (_latin1, "not UTF-8 text"),
], ids=["gzip bomb", "drips for ever", "nested 20k deep", "not UTF-8"])
def test_a_hostile_web_search_reply_is_an_error_naming_its_bound(behave: Any, words: str) -> None:
    with Hostile(behave) as srv, TavilySearch(api_key="tvly-test", base_url=srv.origin, timeout=2.0) as tavily:
        with pytest.raises(SearchBackendError) as err:
            tavily.search("dka first step", 3)
    assert words in str(err.value), err.value


SERVER = r"""
import sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", str(10**12))
        self.end_headers()
        end = time.monotonic() + 300
        try:
            while time.monotonic() < end:  # a byte every 0.2 s: no read ever times out
                self.wfile.write(b"x"); self.wfile.flush(); time.sleep(0.2)
        except OSError:
            pass

HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.timeout(90)
def test_the_health_check_reads_no_body() -> None:
    """A server that answers 200 and then a body without end is up: the check returns at once."""
    server = ServerProcess(n_ctx=512, n_threads=1, log_path=None, startup_timeout_s=30)
    server.port = free_port()
    done: list[Any] = []

    def launch() -> None:
        try:
            done.append(server.launch([sys.executable, "-c", SERVER, str(server.port)],
                                      ready_url=f"http://127.0.0.1:{server.port}/health", poll_s=0.1))
        except Exception as exc:
            done.append(exc)

    thread = threading.Thread(target=launch, daemon=True)
    try:
        thread.start()
        thread.join(60)
        assert done == [server.base_url], done or "the check is still reading the body"
    finally:
        server.stop()
    assert isinstance(server.proc, subprocess.Popen) and server.proc.poll() is not None  # stopped
