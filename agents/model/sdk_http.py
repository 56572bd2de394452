"""The openai SDK's HTTP client for Azure (`backends.PostedChat`), bounded like `LeanChatClient`.

The SDK's default httpx client follows redirects, with the request body: a 307 to another host
would carry the prompts there (httpx drops the key, not the body). This one follows none, so a 3xx
is the SDK's status error for it (kind `redirect`). Its response hook hands every reply's headers
to the rate limits and replaces the body's stream with `CappedStream`, which decompresses it itself
in bounded steps and refuses it past `model.max_reply_bytes`, before the SDK reads or parses it.
A reply that drips for ever is ended by `RecordingClient`'s deadline on the whole call.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import openai

from medpanel.agents.model.lean_chat import SDK_HTTPX
from medpanel.agents.model.probe import observe
from medpanel.agents.model.reply_bounds import BadReply, ReplyMeter
from medpanel.agents.model.tls import ssl_context as ssl_context  # re-exported where it always was

_STEP = 2**20
"""Bytes inflated at a time: a gzip bomb never becomes more than this at once."""

ENCODINGS = "gzip, deflate"
"""What is asked for (`Accept-Encoding`) and read: zlib, whose output can be bounded step by step."""




class CappedStream(SDK_HTTPX.AsyncByteStream):  # type: ignore[misc]  # the SDK's httpx, whichever it ships
    """A reply body's raw stream, decompressed here and counted by a `ReplyMeter` as it is read."""

    def __init__(self, raw: Any, encoding: str, limit: int) -> None:
        self.raw = raw
        self.meter = ReplyMeter(limit)
        name = encoding.strip().lower()
        if name in ("", "identity"):
            self.inflate: Any = None
        elif name in ("gzip", "x-gzip"):
            self.inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif name == "deflate":
            self.inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # zlib or gzip header, found by zlib
        else:
            raise BadReply(f"the endpoint compressed its reply as {encoding[:40]!r}; medpanel asks for "
                           f"{ENCODINGS} and reads nothing else")

    def _decoded(self, data: bytes) -> Iterator[bytes]:
        if self.inflate is None:
            yield data
            return
        try:
            out = self.inflate.decompress(data, _STEP)
            while out:
                yield out
                out = self.inflate.decompress(self.inflate.unconsumed_tail, _STEP)
        except zlib.error as exc:
            raise BadReply(f"the endpoint's compressed reply is corrupt ({exc})") from None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.raw:
            for piece in self._decoded(chunk):
                self.meter.add(piece)
                yield piece

    async def aclose(self) -> None:
        await self.raw.aclose()


def bounded_hook(max_reply_bytes: int) -> Callable[[Any], Awaitable[None]]:
    """The response hook: headers to the rate limits, the body behind a `CappedStream`."""

    async def hook(response: Any) -> None:
        observe(response.status_code, response.headers)
        encoding = response.headers.get("content-encoding", "")
        response.stream = CappedStream(response.stream, encoding, max_reply_bytes)
        if encoding:
            del response.headers["content-encoding"]  # decoded above: the SDK's httpx must not decode again

    return hook


def sdk_http_client(timeout_s: float, max_reply_bytes: int) -> object:
    """The SDK's own client class, with no redirect followed and the reply hook."""
    return openai.DefaultAsyncHttpxClient(verify=ssl_context(), timeout=timeout_s, follow_redirects=False,
                                          headers={"Accept-Encoding": ENCODINGS},
                                          event_hooks={"response": [bounded_hook(max_reply_bytes)]})
