"""A scripted AutoGen model client: deterministic replies for tests and benchmarks.

Tests pass a responder that sees who is calling (`tag`), the messages and the reply model, and
returns text, a dict or a model instance. Without one, the client builds a reply valid for the
reply model's JSON schema (`schema_reply`: nested objects, lists of objects, enums, consts ...)
whose choices come from a hash of the messages: deterministic, spread over the options, never a
fixed letter, and blind to the gold answer, which no request carries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from autogen_core import CancellationToken
from autogen_core.models import ChatCompletionClient, CreateResult, LLMMessage, ModelInfo, RequestUsage
from autogen_core.tools import Tool, ToolSchema
from pydantic import BaseModel

from medpanel.agents.model.client import CallTag, to_openai
from medpanel.agents.model.schema_reply import HashedDraw, build
from medpanel.agents.model.structured import schema_of


@dataclass
class ScriptedRequest:
    tag: CallTag
    messages: list[dict[str, str]]
    model: type[BaseModel] | None
    extra: dict[str, object] = dataclasses.field(default_factory=dict)
    """The create args sent with the call (per-call `seed`/`temperature` overrides among them)."""

    @property
    def last(self) -> str:
        """The newest message's text (what the role was just asked)."""
        return str(self.messages[-1]["content"]) if self.messages else ""

    @property
    def system(self) -> str:
        return str(self.messages[0]["content"]) if self.messages and self.messages[0]["role"] == "system" else ""


Responder = Callable[[ScriptedRequest], "str | dict[str, object] | BaseModel"]


def synthesize(model: type[BaseModel], seed: str) -> dict[str, object]:
    """A reply valid for `model`'s schema, every choice drawn from a hash of `seed` (`schema_reply`)."""
    return cast("dict[str, object]", build(schema_of(model), HashedDraw(seed)))  # a model's schema is an object


class ScriptedChatCompletionClient(ChatCompletionClient):
    def __init__(self, responder: Responder | None = None, *, latency_ms: float = 0.0) -> None:
        self.responder = responder
        self.latency_ms = latency_ms
        self.tag = CallTag()
        """Set by `RecordingClient` before each call, so scripts can answer per role."""
        self.requests: list[ScriptedRequest] = []

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
        model = json_output if isinstance(json_output, type) and issubclass(json_output, BaseModel) else None
        # A copy: the caller reuses its tag object for the next call.
        tag = dataclasses.replace(self.tag)
        request = ScriptedRequest(tag=tag, messages=[to_openai(m) for m in messages], model=model,
                                  extra=dict(extra_create_args))
        self.requests.append(request)
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        if self.responder is not None:
            reply = self.responder(request)
        elif model is not None:
            # A per-call seed (self-consistency samples) draws a different reply, as a sampler would.
            seed = f"/seed={request.extra['seed']}" if "seed" in request.extra else ""
            reply = synthesize(model, json.dumps(request.messages, sort_keys=True) + seed)
        else:
            reply = "scripted reply"
        if isinstance(reply, BaseModel):
            text = reply.model_dump_json()
        elif isinstance(reply, dict):
            text = json.dumps(reply)
        else:
            text = str(reply)
        prompt_tokens = sum(len(str(m["content"])) for m in request.messages) // 4
        return CreateResult(finish_reason="stop", content=text, cached=False,
                            usage=RequestUsage(prompt_tokens=prompt_tokens, completion_tokens=len(text) // 4))

    def create_stream(
        self, messages: Sequence[LLMMessage], **kwargs: Any
    ) -> AsyncGenerator[str | CreateResult, None]:
        async def gen() -> AsyncGenerator[str | CreateResult, None]:
            yield await self.create(messages, **kwargs)

        return gen()

    async def close(self) -> None:
        return None

    def actual_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)

    def total_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        return 0

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        return 1_000_000

    @property
    def capabilities(self) -> Any:
        return self.model_info

    @property
    def model_info(self) -> ModelInfo:
        return ModelInfo(vision=False, function_calling=False, json_output=True, family="scripted",
                         structured_output=True)
