"""The four requests of OpenAI's Batch API, on an aiohttp session of the batcher's own event loop.

`POST /files` (multipart, `purpose=batch`) uploads the JSONL file of requests, `POST /batches`
(`endpoint: /v1/chat/completions`, `completion_window: 24h`) starts it, `GET /batches/{id}` says
how far it is, and `GET /files/{id}/content` downloads its output and error files. The same shape
is served by Azure OpenAI's v1 routes and by vLLM's OpenAI server for files. A non-2xx answer is
raised as the SDK's own exception for it (as `LeanChatClient` raises a chat call's), so the items
of a batch that could not be sent are retried by kind like any failed call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import openai

from medpanel.agents.model.lean_chat import SDK_HTTPX
from medpanel.agents.model.reply_bounds import ReplyMeter, too_large

BATCH_ENDPOINT = "/v1/chat/completions"
TERMINAL = ("completed", "failed", "expired", "cancelled")
"""A batch in one of these states changes no more; `cancelling` and `finalizing` still do."""


class BatchAPI:
    """Files and batches at `base_url` (e.g. `https://api.openai.com/v1`) with the run's key."""

    def __init__(self, *, base_url: str, headers: dict[str, str], timeout_s: float, ssl: Any = None,
                 max_file_bytes: int = 2**31) -> None:
        self.base = base_url.rstrip("/")
        self.headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        self.timeout_s = timeout_s
        self.ssl = ssl
        self.max_file_bytes = max_file_bytes
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl if self.ssl else True),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._session

    async def _call(self, method: str, path: str, *, limit: int | None = None, **kwargs: Any) -> bytes:
        """The answer's body. A JSON answer (a file or a batch object) is read under the bounds of a
        chat reply; a file's content (`limit`) by size only: each of its lines is one reply, checked
        as one where it is handed back."""
        url = self.base + path
        try:
            async with self._open().request(method, url, headers=self.headers, allow_redirects=False,
                                            **kwargs) as reply:
                meter = ReplyMeter(2**24)
                size = 0
                parts: list[bytes] = []
                async for chunk in reply.content.iter_any():
                    if limit is None:
                        meter.add(chunk)
                    else:
                        size += len(chunk)
                        if size > limit:
                            raise too_large(limit)
                    parts.append(chunk)
                raw, status, headers = b"".join(parts), reply.status, reply.headers
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            raise openai.APITimeoutError(request=_request(method, url)) from TimeoutError(
                f"{method} {path}: no whole answer within {self.timeout_s:g} s")
        except aiohttp.ClientError as exc:
            raise openai.APIConnectionError(request=_request(method, url)) from exc
        if not 200 <= status < 300:
            response = SDK_HTTPX.Response(status, headers=list(headers.items()), content=raw,
                                          request=_request(method, url))
            client = openai.AsyncOpenAI(api_key="unused", base_url=self.base, max_retries=0)
            try:
                raise client._make_status_error_from_response(response)
            finally:
                await client.close()
        return raw

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, object]:
        raw = await self._call(method, path, **kwargs)
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"{method} {path} answered with text that is not JSON ({raw[:80]!r})") from exc
        if not isinstance(doc, dict):
            raise ValueError(f"{method} {path} answered with {type(doc).__name__}, not an object")
        return doc

    async def upload(self, data: bytes, name: str) -> str:
        """The JSONL file uploaded with `purpose=batch`; its file id."""
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", data, filename=name, content_type="application/jsonl")
        return str((await self._json("POST", "/files", data=form))["id"])

    async def create(self, input_file_id: str, metadata: dict[str, str] | None = None) -> dict[str, object]:
        body: dict[str, object] = {"input_file_id": input_file_id, "endpoint": BATCH_ENDPOINT,
                                "completion_window": "24h"}
        if metadata:
            body["metadata"] = metadata
        return await self._json("POST", "/batches", json=body)

    async def retrieve(self, batch_id: str) -> dict[str, object]:
        return await self._json("GET", f"/batches/{batch_id}")

    async def list_batches(self) -> list[dict[str, object]]:
        """The most recent batches (`GET /batches?limit=100`), newest first."""
        data = (await self._json("GET", "/batches", params={"limit": "100"})).get("data")
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    async def content(self, file_id: str) -> bytes:
        """An output or error file, read under `max_file_bytes`."""
        return await self._call("GET", f"/files/{file_id}/content", limit=self.max_file_bytes)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _request(method: str, url: str) -> Any:
    return SDK_HTTPX.Request(method, url)
