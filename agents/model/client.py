"""The one door every model call goes through: format enforcement, cache, retries, recording.

`RecordingClient` is an AutoGen `ChatCompletionClient`, so `AssistantAgent`s use it unchanged.
It wraps the raw backend client of one trial and turns each `create` into a transcript event.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autogen_core import CancellationToken
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelInfo,
    RequestUsage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel

from medpanel.agents.events import Act
from medpanel.agents.model.cache import ResponseCache, cache_key
from medpanel.agents.model.halted import RunHalted as RunHalted  # re-exported where it always was
from medpanel.agents.model.limits import RateLimits, request_tokens
from medpanel.agents.model.probe import probing
from medpanel.agents.model.replay import Replay, replayed
from medpanel.agents.model.reply_bounds import checked_usage, stored_usage_ok
from medpanel.agents.model.retries import BackoffWait as BackoffWait  # re-exported where they always were
from medpanel.agents.model.retries import describe_error as describe_error
from medpanel.agents.model.retries import error_kind as error_kind
from medpanel.agents.model.retries import with_retries
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.model.structured import capped_schema, schema_of, strict_response_format
from medpanel.agents.redact import redact
from medpanel.agents.types import TranscriptEvent, Usage

Hook = Callable[[TranscriptEvent], object]
"""Called with every event a session records (the runner's cost and progress tally)."""
Gate = Callable[[], Awaitable[object]]
"""Awaited before every model call (the endpoint's health, the run's budget): it may wait or raise."""


class ModelCallError(RuntimeError):
    """A call that still failed after its retries. `kind` groups errors in the run summary."""

    def __init__(self, kind: str, message: str, attempts: int) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.attempts = attempts


def to_openai(message: LLMMessage) -> dict[str, str]:
    """An AutoGen message as the OpenAI-format dict the endpoint receives and the transcript records.

    It matches AutoGen's own conversion (user messages carry their source as `name`, assistant
    messages do not), so a transcript shows exactly the request that was sent; a test holds them
    equal against a real HTTP server."""
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, UserMessage):
        content = message.content if isinstance(message.content, str) else str(message.content)
        return {"role": "user", "name": message.source, "content": content}
    if isinstance(message, AssistantMessage):
        return {"role": "assistant", "content": str(message.content)}
    if isinstance(message, FunctionExecutionResultMessage):
        return {"role": "tool", "content": str(message.content)}
    return {"role": "unknown", "content": str(message)}


SAMPLING_OVERRIDES = ("seed", "temperature", "max_tokens")
"""What `RecordingClient.overrides` may change per call; `max_tokens` is a stage's own cap as its
method's code sets it, or None for none (the endpoint's limit); `temperature` None sends none, so
the provider's default applies (a method whose code passes no temperature on that call)."""


def unsent(body: dict[str, Any]) -> dict[str, Any]:
    """`body` without the sampling fields a per-call override set to None: such a field is left out
    of the request (the endpoint's own default), never sent as a null. The cache key keeps the None,
    so such a call never shares a reply with one that sent a value."""
    for key in SAMPLING_OVERRIDES:
        if key in body and body[key] is None:
            del body[key]
    return body


@dataclass
class CallTag:
    """Who is calling and why; set by the role before each call, copied into the event."""

    role: str = ""
    agent: str = ""
    step: str = ""
    round: int = 0
    turn: int = 0
    act: Act | None = None
    """What the reply is in the debate (`agents.events`), copied into the event as its `act`."""


@dataclass
class QuestionSession:
    """What all agents of one question share: the raw client, the cache, the event list."""

    spec: ModelSpec
    inner: ChatCompletionClient
    base_url: str | None = None
    cache: ResponseCache | None = None
    events: list[TranscriptEvent] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)
    """Callables `(event) -> None` run after every call (budgets, progress)."""
    before_call: Gate | None = None
    """An async callable awaited before every request that goes to the model (not cache hits):
    the run's shared rate limit, and the halt check that raises `RunHalted` once a budget is spent."""
    limits: RateLimits | None = None
    """The process's shared RPM/TPM limits; every attempt (retries included) waits for a slot."""
    replay: Replay | None = None  # `--replay RUN_DIR` (agents/model/replay.py)
    namespace: str | None = None
    """`model.cache: condition`: the condition's slug, part of every cache key, so conditions never
    answer each other's requests (a repeat's seed already keeps repeats apart)."""

    label: str | None = None
    """`models:` label of this session's model: in every cache key and call event (`data.model_label`)."""
    routes: dict[str, Any] = field(default_factory=dict)
    """Role -> `agents.model.route.RoleRoute`: where `roles:` sends that role's calls."""

    def record(self, event: TranscriptEvent) -> None:
        self.events.append(event)
        for hook in self.hooks:
            hook(event)


class RecordingClient(ChatCompletionClient):
    """Wraps the trial's raw client for one agent; every `create` becomes a `TranscriptEvent`."""

    def __init__(self, session: QuestionSession) -> None:
        self.session = session
        self.tag = CallTag()
        self.response_model: type[BaseModel] | None = None
        """The reply model the next call must satisfy; enforced as the backend's mode allows."""
        self.last_event: TranscriptEvent | None = None
        self.overrides: dict[str, Any] = {}
        """Per-call sampling parameters (`seed`, `temperature`, `max_tokens`) that replace the spec's:
        merged into the cache key and sent as create args, so self-consistency samples are distinct
        requests and a per-stage reply cap is part of what the cache answers."""

    @property
    def max_tokens(self) -> int | None:
        """This call's reply cap: the stage's own (`overrides`, None for none) or the model block's."""
        cap = self.overrides["max_tokens"] if "max_tokens" in self.overrides else self.session.spec.max_tokens
        return None if cap is None else int(cap)

    def _check_overrides(self) -> None:
        if self.overrides and (unknown := set(self.overrides) - set(SAMPLING_OVERRIDES)):
            raise ValueError(f"unknown sampling override(s) {sorted(unknown)}; use {', '.join(SAMPLING_OVERRIDES)}")

    def _request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        spec = self.session.spec
        schema = schema_of(self.response_model) if self.response_model else None
        self._check_overrides()
        request = {
            "model": spec.model_name,
            "backend": spec.backend,
            # The embedded server gets a new port each start; its identity is the model and the program
            # that serves it (the two servers' replies differ), not the URL.
            "base_url": ("embedded" if spec.local_server == "llama-cpp-python" else "embedded:llama-server")
            if spec.backend == "local" else spec.base_url,
            "temperature": spec.temperature,
            "seed": spec.seed,
            "max_tokens": spec.max_tokens,
            "mode": spec.mode,
            "schema": schema,
            "string_cap": spec.string_cap if spec.mode == "json_object" else None,
            "messages": messages,
        } | self.overrides
        if self.session.namespace is not None:
            # Only when set, so `cache: run` keys (and existing caches) stay as they were.
            request["cache_namespace"] = self.session.namespace
        if self.session.label is not None:  # two blocks may share name and endpoint: never each other's reply
            request["model_label"] = self.session.label
        return request

    def _key(self, oai: list[dict[str, Any]], *, looked_up: bool) -> str:
        """The call's cache key; "" where no cache or replay looks it up, without building its request."""
        self._check_overrides()
        return cache_key(self._request(oai)) if looked_up else ""

    async def _call_inner(self, messages: Sequence[LLMMessage], oai: list[dict[str, Any]]) -> CreateResult:
        spec = self.session.spec
        json_output: bool | type[BaseModel] | None = None
        extra: dict[str, object] = {}
        if self.response_model is not None:
            if spec.mode == "json_schema" and spec.backend == "scripted":
                json_output = self.response_model  # the scripted client synthesises from the model
            elif spec.mode == "json_schema":
                # Sent as a plain response_format (not AutoGen's parse path), so a reply that breaks
                # the schema comes back as text: medpanel then re-asks once instead of retrying the
                # identical request as a transport error.
                extra["response_format"] = strict_response_format(self.response_model)
            elif spec.mode == "json_object":
                extra["response_format"] = {"type": "json_object",
                                            "schema": capped_schema(self.response_model, spec.string_cap)}
        extra.update(self.overrides)
        inner = self.session.inner
        if hasattr(inner, "tag"):
            inner.tag = self.tag  # scripted clients answer per role
        # The lean HTTP client takes `oai`, the messages as converted for the event: one conversion a call.
        create_openai = getattr(inner, "create_openai", None) if json_output is None else None
        coro = (create_openai(oai, extra) if create_openai is not None
                else inner.create(messages, json_output=json_output, extra_create_args=extra))
        # A batch answers within its completion window, not model.timeout_s; a client whose own
        # deadline covers the whole call, within this one's, needs no second timer on every call.
        own = getattr(inner, "whole_call_s", None)
        if getattr(inner, "batched", False) or (own is not None and own <= spec.timeout_s + 5):
            result = await coro
            if not isinstance(result.content, str):
                raise ValueError("the model returned tool calls; medpanel roles expect text")
            return result
        # The whole call's deadline, whatever the client's own timeouts (httpx's are per read: a
        # reply that drips a byte at a time would never end on them).
        try:
            if sys.version_info >= (3, 11):
                # A deadline on this task: `wait_for` (before 3.12) ran the call as a task of its own,
                # one more hand-off through the event loop on every call.
                async with asyncio.timeout(spec.timeout_s + 5):
                    result = await coro
            else:
                result = await asyncio.wait_for(coro, timeout=spec.timeout_s + 5)
        except asyncio.TimeoutError:
            raise asyncio.TimeoutError(f"no whole reply within model.timeout_s ({spec.timeout_s:g} s) "
                                       "and 5 s of grace") from None
        if not isinstance(result.content, str):
            raise ValueError("the model returned tool calls; medpanel roles expect text")
        return result

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: object = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, object] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        if isinstance(json_output, type) and issubclass(json_output, BaseModel):
            self.response_model = json_output
        spec = self.session.spec
        oai = [to_openai(m) for m in messages]
        cache = self.session.cache if spec.cache != "off" else None
        replay = self.session.replay
        key = self._key(oai, looked_up=cache is not None or replay is not None)
        event = TranscriptEvent(kind="call", role=self.tag.role, agent=self.tag.agent, step=self.tag.step,
                                round=self.tag.round, turn=self.tag.turn, messages=oai, model=spec.model_name,
                                act=self.tag.act)
        if self.overrides:
            event.data["sampling"] = dict(self.overrides)
        if self.session.label is not None:
            event.data["model_label"] = self.session.label
        lock = cache.lock(key) if cache is not None else None
        if lock is not None:
            # Another worker may be asking the very same thing right now: wait and reuse its reply.
            await asyncio.to_thread(lock.acquire)
        try:
            hit = cache.get(key) if cache is not None else None
            if hit is not None and not stored_usage_ok(hit):
                hit = None  # an endpoint's absurd usage, cached before it was checked: asked again
            if hit is not None:
                event.content = hit["content"]
                event.usage = Usage(prompt_tokens=hit["prompt_tokens"], completion_tokens=hit["completion_tokens"],
                                    cached_tokens=hit.get("cached_tokens", 0))
                event.cache_hit = True
                event.attempts = 1
                self._finish(event)
                return CreateResult(finish_reason="stop", content=hit["content"], cached=True,
                                    usage=RequestUsage(prompt_tokens=0, completion_tokens=0))
            stored = replay.answer(key, self.tag, RunHalted) if replay is not None else None
            # The source run's reply, recorded as the call it was there (not a cache hit).
            if stored is not None and stored_usage_ok(stored):
                if cache is not None:
                    cache.put(key, dict(stored))
                return replayed(event, stored, self._finish)
            if self.session.before_call is not None:
                await self.session.before_call()
            start = time.perf_counter()
            attempts = 0
            limits = self._limits()
            batch: list[str | None] = []

            async def once() -> tuple[CreateResult, tuple[int, int, int]]:
                """One attempt: its result and usage (prompt, completion and cached prompt tokens, each
                checked: an absurd figure is a retried bad reply, never stored or counted)."""
                nonlocal attempts
                attempts += 1
                reserve = self.max_tokens or spec.max_tokens  # an uncapped call reserves the block's
                ticket = await limits.acquire(request_tokens(oai, reserve)) if limits else None
                used: int | None = None
                try:
                    with probing(limits) as probe:
                        result = await self._call_inner(messages, oai)
                    batch.append(probe.batch)
                    usage = checked_usage(result.usage.prompt_tokens, result.usage.completion_tokens,
                                          probe.cached_tokens)
                    used = usage[0] + usage[1]
                    return result, usage
                finally:
                    if limits is not None and ticket is not None:
                        limits.settle(ticket, used)

            try:
                result, (prompt_tokens, completion_tokens, cached) = await with_retries(once, spec.max_retries)
            except Exception as exc:
                event.latency_s = time.perf_counter() - start
                event.attempts = attempts
                kind = error_kind(exc)
                # An endpoint may echo the key in its error body: mask it before it is recorded.
                text = redact(describe_error(exc))
                event.error = f"{kind}: {text}"[:2000]
                self._finish(event)
                raise ModelCallError(kind, text[:500], attempts) from exc
            event.latency_s = time.perf_counter() - start
            event.attempts = attempts
            assert isinstance(result.content, str)
            event.content = result.content
            event.usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cached_tokens=cached)
            _answered_by(event, batch[-1] if batch else None)
            if cache is not None:
                cache.put(key, {"content": result.content, "prompt_tokens": prompt_tokens,
                                "completion_tokens": completion_tokens, "cached_tokens": cached})
            self._finish(event)
            return result
        finally:
            if lock is not None:
                lock.release()

    def _limits(self) -> RateLimits | None:
        # A batch has its own quota: the per-minute limits are for direct calls.
        return None if getattr(self.session.inner, "batched", False) else self.session.limits

    def _finish(self, event: TranscriptEvent) -> None:
        # A call's time is when its reply (or error) came back: the event was built before the call,
        # and readers place the call at (t - latency_s, t). Stamped at creation, a slow call would seem
        # to start before the calls that finished ahead of it.
        event.t = time.time()
        self.last_event = event
        self.session.record(event)

    def create_stream(
        self, messages: Sequence[LLMMessage], **kwargs: Any
    ) -> AsyncGenerator[str | CreateResult, None]:
        async def gen() -> AsyncGenerator[str | CreateResult, None]:
            yield await self.create(messages, **kwargs)

        return gen()

    async def close(self) -> None:
        # The raw client belongs to the trial, which closes it once for all agents.
        return None

    def actual_usage(self) -> RequestUsage:
        return self._usage(cached=False)

    def total_usage(self) -> RequestUsage:
        return self._usage(cached=True)

    def _usage(self, *, cached: bool) -> RequestUsage:
        evs = [e for e in self.session.events if e.kind == "call" and (cached or not e.cache_hit)]
        return RequestUsage(prompt_tokens=sum(e.usage.prompt_tokens for e in evs),
                            completion_tokens=sum(e.usage.completion_tokens for e in evs))

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        # A rough count (4 characters a token) is enough for the context window's bookkeeping.
        return sum(len(str(m.content)) for m in messages) // 4

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        window = self.session.spec.context_limit
        return 1_000_000 if window is None else max(0, window - self.count_tokens(messages))

    @property
    def capabilities(self) -> Any:  # deprecated in AutoGen, still abstract
        return self.model_info

    @property
    def model_info(self) -> ModelInfo:
        return ModelInfo(vision=False, function_calling=False, json_output=True,
                         family=self.session.spec.family, structured_output=True)


def _answered_by(event: TranscriptEvent, batch: str | None) -> None:
    """The batch whose line answered the call (`model.batch`), in its event: priced at the batch rate."""
    if batch is not None:
        event.data["batch"] = batch
