"""An OpenAI-compatible chat endpoint as an AutoGen `ChatCompletionClient`, one aiohttp POST a call.

The openai SDK's request path (its httpx transport, httpcore's pool, h11, anyio, then building a
pydantic `ChatCompletion` and AutoGen's `CreateResult` from it) cost about 3 ms of CPU a call, more
than all of medpanel's own work per call (`python -m benchmarks.bench_lean`). medpanel sends
JSON-ready dicts and reads three fields of the reply, so this client posts the body with aiohttp
(its HTTP parser is C), `json.loads` the reply and builds the `CreateResult` itself. Agents still
talk to AutoGen's interface (`RecordingClient` wraps this like any other `ChatCompletionClient`).

What stays as it was with the SDK:
- the request: AutoGen's message conversion (`client.to_openai`, consecutive system messages merged
  and stripped as AutoGen does for models without `multiple_system_messages`), the model block's
  `create_args`, the per-call `extra_create_args`, a `max_tokens: None` or `temperature: None`
  override sent as no such field;
- errors: a non-2xx reply is raised as the SDK's own exception for it (`RateLimitError`,
  `AuthenticationError`, `InternalServerError`..., built by the SDK from the status, headers and
  body), a transport failure as `APIConnectionError`, a timeout as `APITimeoutError`, each with the
  cause chained, so `client.error_kind`, retries and `Retry-After` read them unchanged; a 200 that
  is not a chat completion is the same `ValueError` (`bad_response`) as `PostedChat`'s;
- the probe: every reply's headers go to the rate limits, the cached prompt tokens to the call.

What an endpoint controls is bounded (`reply_bounds.py`): the body is read, decompressed, under
`model.max_reply_bytes`, and within `model.timeout_s` as a whole (a body that drips one byte at a
time ends there); no redirect is followed, since the request carries the prompts (a 3xx is the
SDK's status error for it, kind `redirect`); the JSON's depth, its containers, its choices and
its usage figures are checked before any of them is used.
Azure (its deployment routes and `api-key` header) keeps the SDK path (`backends.PostedChat`).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import nullcontext
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from autogen_core import CancellationToken
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    ModelFamily,
    ModelInfo,
    RequestUsage,
)
from autogen_core.tools import Tool, ToolSchema
from autogen_ext.models._utils.parse_r1_content import parse_r1_content
from yarl import URL

from medpanel.agents.model.client import to_openai, unsent
from medpanel.agents.model.endpoint_errors import loaded
from medpanel.agents.model.probe import note_cached, observe
from medpanel.agents.model.reply_bounds import (
    DEFAULT_MAX_REPLY_BYTES,
    BadReply,
    ReplyMeter,
    completion_choices,
    parse_json,
    usage_of,
)
from medpanel.agents.model.spread import spread_for

if TYPE_CHECKING:
    import openai


def sdk() -> ModuleType:
    """The openai SDK, imported on the first error reply (half a second): a call that succeeds
    never needs it, only its exceptions for a refusal, a timeout or a lost connection do."""
    return importlib.import_module("openai")


def sdk_httpx() -> Any:
    """The httpx the installed SDK builds its exceptions from (openai 3 ships a fork, httpx2)."""
    base = importlib.import_module("openai._base_client")
    return getattr(base, "httpx2", None) or getattr(base, "httpx")  # noqa: B009


def __getattr__(name: str) -> Any:
    # `SDK_HTTPX`, as it always was a name of this module, for the code that builds the SDK's
    # requests and responses (the SDK path, the batch API, tests); imported when first asked for.
    if name == "SDK_HTTPX":
        return sdk_httpx()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

FinishReason = Literal["stop", "length", "function_calls", "content_filter", "unknown"]
_FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length", "content_filter": "content_filter",
                                    "tool_calls": "function_calls", "function_call": "function_calls"}


def merged_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """AutoGen's handling for models without `multiple_system_messages`, on messages in OpenAI form
    (`client.to_openai`'s dicts): consecutive system messages become one (joined by newlines,
    stripped at the end), at the first one's place. The dicts given are not changed (they are also
    the call's transcript, which keeps the system message as it was given); an unchanged one is
    reused, so no AutoGen message is built again for the request."""
    first = -1
    parts: list[str] = []
    last = -1
    for i, m in enumerate(messages):
        if m["role"] == "system":
            if first == -1:
                first = i
            elif last + 1 != i:
                raise ValueError("system messages that are not consecutive cannot be merged into one")
            parts.append(m["content"])
            last = i
    if first == -1:
        return list(messages)
    text = "\n".join(parts).rstrip()
    out = messages[:first] + messages[last + 1:]
    if text:
        only = messages[first] if first == last and messages[first]["content"] == text else None
        out.insert(first, only or {"role": "system", "content": text})
    return out


def sent(reply: object) -> str:
    """What an endpoint sent instead of a usable chat completion, briefly: a parsed completion (an
    SDK `ChatCompletion` or a dict with `choices`) that has none, an HTML page, or other text."""
    chat = loaded("openai.types.chat")  # an SDK `ChatCompletion` exists only where the SDK is loaded
    if (chat is not None and isinstance(reply, chat.ChatCompletion)) or (isinstance(reply, dict)
                                                                         and "choices" in reply):
        return "a chat completion with no choices"
    text = " ".join(str(reply).split())
    kind = "an HTML page" if text[:100].lower().lstrip().startswith(("<!doctype html", "<html", "<")) else "text"
    return f"{kind} ({text[:80]!r}{'...' if len(text) > 80 else ''})"


class LeanChatClient(ChatCompletionClient):
    """`create` = one POST to `<base_url>/chat/completions` on this event loop's aiohttp session."""

    def __init__(self, *, base_url: str, api_key: str, timeout_s: float, create_args: Mapping[str, object],
                 model_info: ModelInfo, ssl: Any = None, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> None:
        # The embedded model's several servers (agents/model/cores.py): each call goes to the least busy.
        self.spread = spread_for(base_url)
        if self.spread is not None:
            base_url = self.spread.urls[0]
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._urls = {u: u.rstrip("/") + "/chat/completions" for u in self.spread.urls} if self.spread else {}
        self.create_args = dict(create_args)
        self.info = model_info
        self.timeout_s = timeout_s
        self.whole_call_s = timeout_s
        """The deadline of a whole call (connection, request, every byte of the reply: aiohttp's total
        timeout on the session), so `RecordingClient` adds none of its own."""
        self.ssl = ssl
        self.max_reply_bytes = max_reply_bytes
        self.headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
                        "Accept": "application/json", "User-Agent": f"medpanel aiohttp/{aiohttp.__version__}"}
        # The SDK sends these when they are set; so does this client.
        for env, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
            if os.environ.get(env):
                self.headers[header] = os.environ[env]
        self._session: aiohttp.ClientSession | None = None
        self._proxy: URL | None = None
        self._proxy_auth: aiohttp.BasicAuth | None = None
        self._base_url, self._api_key = base_url, api_key
        self._sdk: openai.AsyncOpenAI | None = None

    def _errors(self) -> openai.AsyncOpenAI:
        """The SDK's client, built at the first error reply and only to build the SDK's own exception
        for it (`_make_status_error_from_response`): building one costs milliseconds (TLS, httpx)."""
        if self._sdk is None:
            self._sdk = sdk().AsyncOpenAI(api_key=self._api_key, base_url=self._base_url, max_retries=0)
        return self._sdk

    def _request(self, url: str | None = None) -> Any:
        # What the SDK's exceptions name (never sent); built on the error path only, since an httpx
        # Request costs more CPU than the whole aiohttp POST.
        return sdk_httpx().Request("POST", url or self.url)

    def _open(self) -> aiohttp.ClientSession:
        # Built on first use, on the loop that uses it: an aiohttp session belongs to one event loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, ssl=self.ssl if self.ssl else True)
            # The proxy the environment names for this URL (HTTP(S)_PROXY, NO_PROXY, a proxy's
            # credentials in ~/.netrc), as the SDK's httpx honours it, read once per session:
            # `trust_env=True` read it, and ~/.netrc for the endpoint's own credentials, in a
            # thread on every request, two thread hand-offs a call. (A netrc login for the
            # endpoint could only clash with the Authorization header sent.)
            try:
                self._proxy, self._proxy_auth = get_env_proxy_for_url(URL(self.url))
            except LookupError:
                self._proxy, self._proxy_auth = None, None
            self._session = aiohttp.ClientSession(connector=connector,
                                                  timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._session

    def body_of(self, messages: list[dict[str, Any]], extra: Mapping[str, object]) -> dict[str, object]:
        """The request's body from messages in OpenAI form (`client.to_openai`'s dicts)."""
        # A per-call `max_tokens: None` or `temperature: None` override: no field, the endpoint's own default.
        return unsent({"messages": merged_openai(messages), **self.create_args, **extra})

    def payload(self, messages: Sequence[LLMMessage], tools: Sequence[Tool | ToolSchema],
                extra: Mapping[str, object]) -> bytes:
        """The request's bytes, the same whether posted or sent as a line of a batch."""
        if tools:
            raise ValueError("medpanel roles do not call tools")
        return self.payload_of([to_openai(m) for m in messages], extra)

    def payload_of(self, messages: list[dict[str, Any]], extra: Mapping[str, object]) -> bytes:
        """`payload` from messages in OpenAI form."""
        return json.dumps(self.body_of(messages, extra), ensure_ascii=False).encode()

    async def create_openai(self, messages: list[dict[str, Any]], extra: Mapping[str, object]) -> CreateResult:
        """`create` from the messages as `RecordingClient` already converted them for the call's
        event (`client.to_openai`): the same bytes sent, without converting them a second time."""
        return await self.send(self.payload_of(messages, extra))

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: object = "auto",
        json_output: object = None,
        extra_create_args: Mapping[str, object] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        return await self.send(self.payload(messages, tools, extra_create_args))

    async def send(self, data: bytes) -> CreateResult:
        """One request's bytes to the endpoint, its reply as the call's result (a batch client sends
        them as a line of its next batch instead)."""
        with self.spread.take() if self.spread is not None else nullcontext(self._base_url) as base:
            url = self.url if self.spread is None else self._urls[base]
            try:
                session = self._open()
                # No redirect is followed: a 307 would resend the prompts to wherever it points.
                async with session.post(url, data=data, headers=self.headers, proxy=self._proxy,
                                        proxy_auth=self._proxy_auth, allow_redirects=False) as reply:
                    raw = await self._read(reply)
                    status, headers = reply.status, reply.headers
            except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
                # The session's total timeout covers the body too: a reply that never ends stops here.
                raise sdk().APITimeoutError(request=self._request(url)) from TimeoutError(
                    f"no whole reply within model.timeout_s ({self.timeout_s:g} s)")
            except aiohttp.ClientError as exc:
                raise sdk().APIConnectionError(request=self._request(url)) from exc
        observe(status, headers)
        return self.result(status, headers, raw, url)

    def result(self, status: int, headers: Mapping[str, str], raw: bytes, url: str | None = None) -> CreateResult:
        """A reply's status and body as the call's result, or the SDK's exception for it (a batch
        line's reply is read here too: `batch_client.py`)."""
        if not 200 <= status < 300:
            response = sdk_httpx().Response(status, headers=list(headers.items()), content=raw,
                                            request=self._request(url))
            raise self._errors()._make_status_error_from_response(response)
        payload = parse_json(raw)
        choices = completion_choices(payload)
        if choices is None:
            # A ValueError is a retried bad_response, named for what came instead.
            shown = payload if isinstance(payload, dict) else raw.decode("utf-8", errors="replace")
            raise ValueError(f"the endpoint answered {status} with {sent(shown)}, not a chat completion's choices")
        assert isinstance(payload, dict)
        choice = choices[0]
        message = choice.get("message") or {}
        if not isinstance(message, dict):
            raise BadReply(f"the endpoint's choices[0].message is {str(message)[:40]!r}, not an object")
        if message.get("tool_calls"):
            raise ValueError("the model returned tool calls; medpanel roles expect text")
        prompt_tokens, completion_tokens, cached = usage_of(payload)
        note_cached(cached)
        content = message.get("content") or ""
        thought = message.get("reasoning_content")
        if self.info["family"] == ModelFamily.R1 and thought is None:  # local R1 models: as AutoGen splits them
            thought, content = parse_r1_content(content)
        return CreateResult(finish_reason=_FINISH.get(str(choice.get("finish_reason")), "unknown"),
                            content=content, cached=False, thought=thought,
                            usage=RequestUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens))

    async def _read(self, reply: aiohttp.ClientResponse) -> bytes:
        """The body as aiohttp decodes it (gzip, deflate...: in bounded steps), refused once it passes
        `max_reply_bytes` or holds too many containers, before the rest is read or inflated."""
        meter = ReplyMeter(self.max_reply_bytes)
        parts: list[bytes] = []
        async for chunk in reply.content.iter_any():
            meter.add(chunk)
            parts.append(chunk)
        return b"".join(parts)

    def create_stream(self, messages: Sequence[LLMMessage], **kwargs: Any) -> AsyncGenerator[str | CreateResult, None]:
        async def gen() -> AsyncGenerator[str | CreateResult, None]:
            yield await self.create(messages, **kwargs)

        return gen()

    def is_closed(self) -> bool:
        """No connection left open: never used, or closed."""
        return self._session is None or self._session.closed

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._sdk is not None:
            await self._sdk.close()

    def actual_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)  # RecordingClient counts usage

    def total_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        return sum(len(str(m.content)) for m in messages) // 4

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        return 1_000_000

    @property
    def capabilities(self) -> Any:  # deprecated in AutoGen, still abstract
        return self.info

    @property
    def model_info(self) -> ModelInfo:
        return self.info
