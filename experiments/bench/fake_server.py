"""A small OpenAI-compatible chat server on 127.0.0.1 (stdlib only), for tests and benchmarks.

`FakeOpenAI(handler)` answers `/v1/chat/completions` with whatever the handler returns (faults
included); `fixed_latency(ms)` builds a handler that answers a valid structured reply after a fixed
delay, and `concurrency` bounds how many requests are served at once, like a real endpoint.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, str], Any]
"""(status, headers, body); a dict body is sent as JSON, a str body verbatim."""


def completion(content: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class FakeOpenAI:
    """Serves `/v1/chat/completions` from a handler `(body, n) -> Reply`; records every request."""

    def __init__(self, handler: Callable[[dict[str, Any], int], Reply], *, concurrency: int | None = None) -> None:
        self.handler = handler
        self.slots = threading.Semaphore(concurrency) if concurrency else None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # /v1/models for health checks
                self._send(200, {}, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer.lock:
                    outer.requests.append(body)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    n = len(outer.requests)
                if outer.slots is not None:
                    with outer.slots:
                        status, headers, payload = outer.handler(body, n)
                else:
                    status, headers, payload = outer.handler(body, n)
                if status == 0:  # drop the connection without an answer
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self._send(status, headers, payload)

            def _send(self, status: int, headers: dict[str, str], payload: Any) -> None:
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def schema_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A reply valid for the request's schema: first enum value, `true`, short strings."""
    fmt = body.get("response_format") or {}
    schema = fmt.get("json_schema", {}).get("schema") or fmt.get("schema") or {}
    defs = schema.get("$defs", {})

    def value(prop: dict[str, Any]) -> Any:
        if "$ref" in prop:
            prop = defs.get(prop["$ref"].split("/")[-1], {})
        if "enum" in prop:
            return prop["enum"][0]
        t = prop.get("type")
        if t == "boolean":
            return False
        if t == "array":
            return [value(prop.get("items", {}))] * max(1, prop.get("minItems", 1))
        if t == "object" or "properties" in prop:
            return {k: value(v) for k, v in prop.get("properties", {}).items()}
        if t in ("integer", "number"):
            return 1
        return "ok"

    return {k: value(v) for k, v in schema.get("properties", {}).items()}


def fixed_latency(ms: float) -> Callable[[dict[str, Any], int], Reply]:
    def handler(body: dict[str, Any], n: int) -> Reply:
        time.sleep(ms / 1000)
        return 200, {}, completion(json.dumps(schema_reply(body)))

    return handler


def main() -> None:
    """`python -m medpanel.experiments.bench.fake_server --latency-ms 200 --concurrency 4` serves until
    killed and prints its base URL: benchmarks run it in its own process so it does not share the
    interpreter lock with the runner being measured."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--concurrency", type=int, default=None)
    args = ap.parse_args()
    srv = FakeOpenAI(fixed_latency(args.latency_ms), concurrency=args.concurrency)
    print(srv.base_url, flush=True)
    srv.server.serve_forever()


if __name__ == "__main__":
    main()
