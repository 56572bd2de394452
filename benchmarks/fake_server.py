"""A small OpenAI-compatible chat server on 127.0.0.1 (stdlib only), for tests and benchmarks.

`FakeOpenAI(handler)` answers `/v1/chat/completions` with whatever the handler returns (faults
included); `latency_ms` makes every answer take exactly that long once a slot is free (the server's
own work included, as with a real endpoint), and `concurrency` bounds how many requests are served
at once. It speaks HTTP/1.1 with keep-alive, like a real endpoint, so clients reuse connections.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self, cast

from medpanel.agents.model.schema_reply import FirstDraw, build

Reply = tuple[int, dict[str, str], Any]
"""(status, headers, body); a dict body is sent as JSON, a str body verbatim."""


def completion(content: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def _encode(payload: Any) -> bytes:
    """A reply body: a str is sent verbatim (truncated JSON and the like), anything else as JSON."""
    return payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()


class WideServer(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: hundreds of clients connecting at once would see dropped
    # connections and retry, which would measure this server, not the client.
    request_queue_size = 1024
    daemon_threads = True


class QuietHandler(BaseHTTPRequestHandler):
    """Kept-alive HTTP/1.1 connections, nothing logged."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, a kept-alive connection waits for the
    # client's delayed ACK (~40 ms) between them.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass


class ServedInThread:
    """A stand-in endpoint on 127.0.0.1 served from a thread of its own, for a `with` block."""

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = WideServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeOpenAI(ServedInThread):
    """Serves `/v1/chat/completions` from a handler `(body, n) -> Reply`; records every request."""

    def __init__(self, handler: Callable[[dict[str, Any], int], Reply], *, concurrency: int | None = None,
                 latency_ms: float = 0.0) -> None:
        self.handler = handler
        self.latency_s = latency_ms / 1000
        self.slots = threading.Semaphore(concurrency) if concurrency else None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.client_ports: list[int] = []
        """The client's port per request: one port for many requests means a kept-alive connection."""
        self.lock = threading.Lock()
        outer = self

        class H(QuietHandler):
            def do_GET(self) -> None:  # /v1/models for health checks; /v1/stats for benchmarks
                if self.path.endswith("/stats"):  # chat completions asked for so far, this process's CPU
                    with outer.lock:
                        n = len(outer.requests)
                    self._send(200, {}, _encode({"requests": n, "cpu_s": time.process_time()}))
                    return
                self._send(200, {}, _encode({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))

            def do_POST(self) -> None:
                arrived = time.perf_counter()
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer.lock:
                    outer.requests.append(body)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    outer.paths.append(self.path)
                    outer.client_ports.append(self.client_address[1])
                    n = len(outer.requests)
                asked = time.perf_counter()
                with outer.slots or contextlib.nullcontext():
                    # Service time runs from arrival, less any wait for a free slot.
                    start = arrived + (time.perf_counter() - asked)
                    status, headers, payload = outer.handler(body, n)
                    data = _encode(payload)
                    # Pad to the fixed latency: the server's own work is part of it, not extra.
                    time.sleep(max(0.0, outer.latency_s - (time.perf_counter() - start)))
                if status == 0:  # drop the connection without an answer
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self._send(status, headers, data)

            def _send(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.serve(H)


def schema_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A reply valid for the request's schema, built by the package's own walk (`schema_reply.build`,
    the scripted model's) with the plain draw: the first enum value, `const`, `false`, the fewest
    items, "ok" for text. A request without a schema gets `{}`."""
    fmt = body.get("response_format") or {}
    schema = fmt.get("json_schema", {}).get("schema") or fmt.get("schema") or {}
    if not schema:
        return {}
    return cast("dict[str, Any]", build(schema, FirstDraw()))  # a reply model's schema is an object


def valid_reply(body: dict[str, Any], n: int) -> Reply:
    """A handler: a valid structured reply for the request's schema, at once."""
    return 200, {}, completion(json.dumps(schema_reply(body)))


def serve_aio(latency_ms: float) -> None:
    """The same answers on one asyncio event loop (aiohttp): no thread per connection, so hundreds
    in flight cost the server a fraction of a millisecond of CPU each. On a 2-core machine the
    threaded server's own CPU (several ms a request) takes a core the runner's processes need."""
    import asyncio

    from aiohttp import web

    served = 0

    async def chat(request: web.Request) -> web.Response:
        nonlocal served
        served += 1
        body = await request.json()
        await asyncio.sleep(latency_ms / 1000)
        return web.Response(body=_encode(valid_reply(body, served)[2]), content_type="application/json")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def stats(request: web.Request) -> web.Response:
        # The server's own CPU: on a machine with few cores it is part of the bound a benchmark meets.
        return web.json_response({"requests": served, "cpu_s": time.process_time()})

    async def run() -> None:
        app = web.Application()
        app.add_routes([web.post("/v1/chat/completions", chat), web.get("/v1/models", models),
                        web.get("/v1/stats", stats)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
        print(f"http://127.0.0.1:{port}/v1", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


def server_stats(base_url: str) -> dict[str, float]:
    """`/v1/stats` of a server in another process: chat completions served and its CPU seconds."""
    import urllib.request

    with urllib.request.urlopen(base_url + "/stats", timeout=10) as r:
        doc = json.loads(r.read())
    return {"requests": float(doc["requests"]), "cpu_s": float(doc.get("cpu_s", 0.0))}


@contextlib.contextmanager
def served_apart(latency_ms: float, *, concurrency: int | None = None, aio: bool = False) -> Iterator[str]:
    """This server (`main`) in a process of its own, and its base URL while it runs: a benchmark's
    endpoint must not share the measured process's interpreter lock."""
    args = [sys.executable, "-m", "benchmarks.fake_server", "--latency-ms", str(latency_ms)]
    args += ["--concurrency", str(concurrency)] if concurrency is not None else []
    args += ["--aio"] if aio else []
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    """`python -m benchmarks.fake_server --latency-ms 200 --concurrency 4` serves until
    killed and prints its base URL: benchmarks run it in its own process so it does not share the
    interpreter lock with the runner being measured. `--aio` serves from one event loop instead
    (no concurrency bound): the server for throughput figures on a machine with few cores."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--aio", action="store_true", help="one asyncio event loop (aiohttp), no thread per connection")
    args = ap.parse_args()
    if args.aio:
        serve_aio(args.latency_ms)
        return
    srv = FakeOpenAI(valid_reply, concurrency=args.concurrency, latency_ms=args.latency_ms)
    print(srv.base_url, flush=True)
    srv.server.serve_forever()


if __name__ == "__main__":
    main()
