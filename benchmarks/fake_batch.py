"""A local Batch API on 127.0.0.1 (stdlib only), following OpenAI's published shapes, for tests and
the batch benchmark.

`FakeBatch(handler)` serves what `fake_server.FakeOpenAI` serves (`/v1/chat/completions`, answered
by the same `(body, n) -> Reply` handler) and the Batch API around it:
- `POST /v1/files` (multipart: `purpose=batch`, `file`) -> a file object; `GET /v1/files/{id}/content`;
- `POST /v1/batches` (`input_file_id`, `endpoint`, `completion_window`) -> a batch object,
  `validating`, then `in_progress` until `latency_s` has passed since it was created, then
  `completed` with an `output_file_id` (the 2xx lines) and an `error_file_id` (the others);
- `GET /v1/batches/{id}` and `GET /v1/batches?limit=` (newest first).
A direct call takes `direct_latency_s`. `fault(n)` picks an ending for the n-th batch (1-based):
None to complete it, or `expired`, `failed` or `cancelled`; an expired batch answers its first
`answered_before_expiry` lines and puts the rest in its error file as `batch_expired`, as OpenAI
does (a failed batch has no files). `paid` counts each body answered
(a line of a completed batch or a direct call): a test of a resume asserts none twice.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks.fake_server import QuietHandler, Reply, ServedInThread, valid_reply


def _multipart(content_type: str, raw: bytes) -> dict[str, bytes]:
    """A multipart/form-data body's fields by name (enough for `purpose` and `file`)."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        return {}
    fields: dict[str, bytes] = {}
    for part in raw.split(b"--" + m.group(1).encode()):
        head, sep, body = part.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head)
        if sep and name:
            fields[name.group(1).decode()] = body.removesuffix(b"\r\n")
    return fields


class FakeBatch(ServedInThread):
    """The Batch API and direct chat completions, from one handler; records what it was sent."""

    def __init__(self, handler: Callable[[dict[str, Any], int], Reply] = valid_reply, *, latency_s: float = 0.5,
                 fault: Callable[[int], str | None] = lambda n: None, answered_before_expiry: int = 0,
                 direct_latency_s: float = 0.0) -> None:
        self.handler = handler
        self.latency_s = latency_s
        self.direct_latency_s = direct_latency_s
        self.fault = fault
        self.answered_before_expiry = answered_before_expiry
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.lines: list[dict[str, Any]] = []
        """Every request line of every batch created, as parsed."""
        self.raw_lines: list[bytes] = []
        self.direct: list[dict[str, Any]] = []
        self.direct_raw: list[bytes] = []
        """Every direct chat completion's body, as the bytes posted."""
        self.paid: Counter[str] = Counter()
        """Request body (as JSON text, keys sorted) -> how many times it was answered and billed."""
        self.lock = threading.Lock()
        self._n = itertools.count(1)
        self._answered = 0
        outer = self

        class H(QuietHandler):
            def _send(self, status: int, payload: Any, raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                with outer.lock:
                    if m := re.fullmatch(r"/v1/files/([\w-]+)/content", path):
                        data = outer.files.get(m.group(1))
                        self._send(200, None, data) if data is not None else self._send(404, _error("no such file"))
                    elif m := re.fullmatch(r"/v1/batches/([\w-]+)", path):
                        batch = outer.batches.get(m.group(1))
                        self._send(200, outer._advance(batch)) if batch else self._send(404, _error("no such batch"))
                    elif path == "/v1/batches":
                        docs = [outer._advance(b) for b in reversed(outer.batches.values())]
                        self._send(200, {"object": "list", "data": docs, "has_more": False})
                    else:
                        self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path == "/v1/files":
                    fields = _multipart(self.headers.get("content-type", ""), raw)
                    if fields.get("purpose") != b"batch" or "file" not in fields:
                        self._send(400, _error("purpose must be batch and a file is required"))
                        return
                    with outer.lock:
                        fid = f"file-{len(outer.files) + 1:05d}"
                        outer.files[fid] = fields["file"]
                    self._send(200, {"id": fid, "object": "file", "bytes": len(fields["file"]),
                                     "purpose": "batch", "filename": "batch.jsonl", "created_at": int(time.time())})
                elif self.path == "/v1/batches":
                    self._send(*outer._create(json.loads(raw)))
                elif self.path.endswith("/chat/completions"):
                    body = json.loads(raw)
                    with outer.lock:
                        outer.direct.append(body)
                        outer.direct_raw.append(raw)
                        n = len(outer.direct) + len(outer.lines)
                    status, _, payload = outer.handler(body, n)
                    time.sleep(outer.direct_latency_s)
                    if status == 200:
                        with outer.lock:
                            outer.paid[_key(body)] += 1
                    self._send(status, payload)
                else:
                    self._send(404, _error(f"no route {self.path}"))

        self.serve(H)

    def _create(self, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if req.get("endpoint") != "/v1/chat/completions" or req.get("completion_window") != "24h":
            return 400, _error("endpoint must be /v1/chat/completions and completion_window 24h")
        with self.lock:
            data = self.files.get(str(req.get("input_file_id")))
            if data is None:
                return 404, _error("no such input file")
            lines = [json.loads(line) for line in data.splitlines() if line.strip()]
            self.lines.extend(lines)
            self.raw_lines.extend(line for line in data.splitlines() if line.strip())
            n = next(self._n)
            bid = f"batch_{n:05d}"
            self.batches[bid] = {"id": bid, "object": "batch", "endpoint": req["endpoint"], "errors": None,
                                 "input_file_id": req["input_file_id"], "completion_window": "24h",
                                 "status": "validating", "output_file_id": None, "error_file_id": None,
                                 "created_at": time.time(), "ending": self.fault(n), "_lines": lines,
                                 "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
            return 200, self._advance(self.batches[bid])

    def _advance(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The batch as a client sees it now; it ends (answering its lines) once latency_s has passed."""
        if batch["status"] in ("validating", "in_progress"):
            if time.time() - batch["created_at"] < self.latency_s:
                batch["status"] = "in_progress"
            else:
                self._finish(batch)
        return {k: v for k, v in batch.items() if not k.startswith("_") and k != "ending"}

    def _finish(self, batch: dict[str, Any]) -> None:
        ending = batch["ending"]
        out: list[bytes] = []
        err: list[bytes] = []
        answer = len(batch["_lines"]) if ending is None else self.answered_before_expiry if ending == "expired" else 0
        for i, line in enumerate(batch["_lines"]):
            cid = line["custom_id"]
            if i >= answer:
                code = f"batch_{ending}"
                err.append(json.dumps({"id": f"req_{i}", "custom_id": cid, "response": None,
                                       "error": {"code": code, "message": f"the batch {ending}"}}).encode())
                continue
            self._answered += 1
            status, _, payload = self.handler(line["body"], self._answered)
            doc = {"id": f"req_{i}", "custom_id": cid, "error": None,
                   "response": {"status_code": status, "request_id": f"r{i}", "body": payload}}
            (out if status == 200 else err).append(json.dumps(doc).encode())
            if status == 200:
                self.paid[_key(line["body"])] += 1
        if ending == "failed":
            err = []  # a batch that failed validation answers nothing and has no files
        for kind, lines in (("output_file_id", out), ("error_file_id", err)):
            if lines:
                fid = f"file-{len(self.files) + 1:05d}"
                self.files[fid] = b"\n".join(lines) + b"\n"
                batch[kind] = fid
        batch["status"] = "completed" if ending is None else ending
        batch["request_counts"].update(completed=len(out), failed=len(err))
        if ending == "failed":
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_file", "message": "fake failure"}]}


def _key(body: Any) -> str:
    return json.dumps(body, sort_keys=True)


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


@contextlib.contextmanager
def serving(**kwargs: Any) -> Any:
    with FakeBatch(**kwargs) as fake:
        yield fake
