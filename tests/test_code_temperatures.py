"""What temperature each published method's call sends, read from the request bodies a local
OpenAI-compatible server receives. A call with no temperature is posted with no such field, never
a null."""

from __future__ import annotations

import asyncio
from typing import Any

from .fake_openai import completion


def test_the_azure_path_posts_a_temperature_none_override_as_no_field() -> None:
    """`PostedChat` (the SDK path Azure keeps) drops a None override as the lean client does."""
    from types import SimpleNamespace

    from medpanel.agents.model.backends import PostedChat

    bodies: list[dict[str, Any]] = []

    async def post(path: str, *, body: dict[str, Any], cast_to: Any, options: Any) -> Any:
        bodies.append(body)
        return cast_to.model_validate(completion('{"answer": "A"}'))

    chat = PostedChat(SimpleNamespace(post=post))  # type: ignore[arg-type]
    asyncio.run(chat.create(model="m", messages=[], temperature=None, seed=42))
    asyncio.run(chat.create(model="m", messages=[], temperature=0.0))
    assert "temperature" not in bodies[0] and bodies[0]["seed"] == 42
    assert bodies[1]["temperature"] == 0.0
