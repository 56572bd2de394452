"""A misbehaving HTTP endpoint on 127.0.0.1 (aiohttp's server, on an event loop in a thread of its own).

`Hostile(behave)` answers every request, any method and path, with what `behave(request, body, n)`
returns: an aiohttp response it may stream itself (a body that drips, never ends or inflates), so
the tests drive medpanel's real HTTP clients against replies no well-behaved fake sends. Every
request is recorded (path, headers, body) before it is answered.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Behave = Callable[[web.Request, bytes, int], Awaitable[web.StreamResponse]]


def completion(content: str = '{"answer": "A"}', usage: Any = None, **top: Any) -> dict[str, Any]:
    """A chat completion whose `usage` is whatever the test says (default: a sane one)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-hostile", "object": "chat.completion", "created": int(time.time()), "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15} if usage is None else usage,
    }
    return body | top


def reply_json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return web.Response(status=status, body=raw, headers={"content-type": "application/json", **(headers or {})})


async def gzip_bomb(request: web.Request, inflated: int = 2 * 2**30, chunk: int = 2**20) -> web.StreamResponse:
    """A 200 whose gzip body inflates to `inflated` bytes of JSON-ish text, compressed as it is sent
    (about 1,000 to 1), so the server never holds it; the client is meant to stop reading early."""
    response = web.StreamResponse(headers={"content-type": "application/json", "content-encoding": "gzip"})
    await response.prepare(request)
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    await response.write(z.compress(b'{"choices": [{"message": {"content": "'))
    block = b"A" * chunk
    try:
        for _ in range(inflated // chunk):
            out = z.compress(block)
            if out:
                await response.write(out)
        await response.write(z.compress(b'"}}]}') + z.flush())
    except (ConnectionError, RuntimeError):
        pass  # the client hung up: what it should do
    return response


async def drip(request: web.Request, every_s: float = 0.2, limit_s: float = 600.0) -> web.StreamResponse:
    """A 200 that sends its headers at once, then one byte of body every `every_s`, for ever (bounded
    here by `limit_s` so a broken client cannot keep the test server's thread busy past the test)."""
    response = web.StreamResponse(headers={"content-type": "application/json"})
    await response.prepare(request)
    deadline = time.monotonic() + limit_s
    try:
        await response.write(b'{"choices": [{"message": {"content": "')
        while time.monotonic() < deadline:
            await response.write(b"a")
            await asyncio.sleep(every_s)
    except (ConnectionError, RuntimeError):
        pass
    return response


class Hostile:
    """`with Hostile(behave) as srv:` serves on `srv.base_url` (http://127.0.0.1:PORT/v1)."""

    def __init__(self, behave: Behave) -> None:
        self.behave = behave
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        """(path with query, headers, body) of every request, in arrival order."""
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    @property
    def posts(self) -> int:
        with self.lock:
            return len(self.requests)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        with self.lock:
            self.requests.append((request.path_qs, dict(request.headers), body))
            n = len(self.requests)
        return await self.behave(request, body, n)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def run() -> None:
            app = web.Application(client_max_size=2**26)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

        self.loop.run_until_complete(run())
        self.loop.close()

    def __enter__(self) -> Hostile:
        self.thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the hostile server did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(30)


def ask(base_url: str, backend: str = "openai", *, limits: Any = None, cache: Any = None,
        **spec: Any) -> tuple[Any, list[Any]]:
    """One model call through `RecordingClient` over the real client `backend` builds (`openai`:
    aiohttp's `LeanChatClient`; `azure`: the openai SDK's httpx), as a role makes it: (the
    `CreateResult` or the exception the call raised, the transcript events recorded)."""
    from autogen_core.models import UserMessage

    from medpanel.agents.model.backends import ModelSpec, build_client
    from medpanel.agents.model.client import QuestionSession, RecordingClient

    settings: dict[str, Any] = {"name": "fake-model", "max_retries": 1, "cache": "off" if cache is None else "run",
                                "max_tokens": 33} | spec
    model = ModelSpec(backend=backend, base_url=base_url.removesuffix("/v1") if backend == "azure" else base_url,
                      **settings)

    async def go() -> tuple[Any, list[Any]]:
        inner = build_client(model)
        session = QuestionSession(spec=model, inner=inner, limits=limits, cache=cache)
        try:
            return await RecordingClient(session).create([UserMessage(content="Which one?", source="u")]), \
                session.events
        except Exception as exc:
            return exc, session.events
        finally:
            await inner.close()

    return asyncio.run(go())
