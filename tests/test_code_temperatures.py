"""What temperature each published method's call sends, read from the request bodies a local
OpenAI-compatible server receives.

Both MDAgents codes send no temperature on `Agent.chat` (so the provider's default, OpenAI's 1.0)
and `temperature=0.0` only on `Agent.temp_responses`, which three calls use: the low route's answer,
the moderator and the ICT decision (MedAgentsBench's copy `baselines/MDAgents/utils.py` @56ca11e:
`chat` 71-79, `temp_responses` 90-106, called at 338, 542 and 641; mitmedialab/MDAgents `utils.py`
@3adbd76: 45-59, 61-81, called at 278, 451 and 525). A call with no temperature is posted with no
such field, never a null, and never shares a cached reply with a call that sent 0."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from medpanel.agents.model.cache import cache_key
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.run import run_question

from .fake_openai import FakeOpenAI, completion, schema_reply
from .multiagent_helpers import method
from .scripted_helpers import Q4

TEMP_RESPONSES = {"solo.answer", "decision.moderator", "decision.answer"}
"""The three calls the codes send through `temp_responses` (temperature 0)."""


def routed(level: str) -> Any:
    """A server whose triage reply routes to `level` and whose every other reply is schema-valid."""
    def handler(body: dict[str, Any], n: int) -> Any:
        reply = schema_reply(body)
        if "complexity" in reply:
            reply["complexity"] = level
        if "talk" in reply:  # every expert talks (to expert 1), so every stage runs
            reply["talk"] = True
        return 200, {}, completion(json.dumps(reply))
    return handler


def sent(condition: Any, level: str, **spec: Any) -> list[tuple[str, dict[str, Any]]]:
    """(step, body) of every request one question sends, in order."""
    with FakeOpenAI(routed(level)) as srv:
        model = ModelSpec(backend="openai", name="fake-model", cache="off", **spec)
        result = asyncio.run(run_question(condition, Q4, model, base_url=srv.base_url))
    assert result.error is None, result.error
    steps = [e.step for e in result.events if e.kind == "call"]
    assert len(steps) == len(srv.requests)
    return list(zip(steps, srv.requests, strict=True))


def test_each_method_sends_the_temperatures_its_code_sends() -> None:
    for variant in (None, "original"):
        for level, expected in (("low", {"triage.complexity", "solo.rationale", "solo.answer"}),
                                ("moderate", {"triage.complexity", "mdt.recruit", "mdt.rationale", "mdt.initial",
                                              "debate.summary", "debate.talk", "debate.choose", "debate.message",
                                              "mdt.final", "decision.moderator"}),
                                ("high", {"triage.complexity", "ict.recruit", "ict.plan", "ict.investigate",
                                          "ict.report", "decision.answer"})):
            calls = sent(method("mdagents", variant, rounds=1, turns=1), level)
            assert {step for step, _ in calls} >= expected, (variant, level)
            for step, body in calls:
                if step in TEMP_RESPONSES:
                    assert body["temperature"] == 0.0, (variant, step)
                else:
                    assert "temperature" not in body, (variant, step)  # the provider's default
                assert body["seed"] == 42  # declared: the codes send no seed
    # MedAgentsBench's `baselines/MedAgents/utils.py` passes `temperature=0` on every call (16-128);
    # KAMAC's `agent/client.py` `temp_responses` its default `temperatures=[0.0]` (620-626, 842-846).
    for name in ("medagents", "kamac"):
        calls = sent(method(name), "low")
        assert calls and all(body["temperature"] == 0.0 for _, body in calls), name


def test_the_model_blocks_temperature_reaches_only_the_calls_that_send_one() -> None:
    calls = sent(method("mdagents"), "high", temperature=0.3)
    assert {body.get("temperature") for step, body in calls if step in TEMP_RESPONSES} == {0.3}
    assert all("temperature" not in body for step, body in calls if step not in TEMP_RESPONSES)


def test_a_call_without_a_temperature_is_keyed_and_recorded_apart_from_one_at_zero() -> None:
    """The cache key holds the None (a request at 0 never answers it), and the call's event says so."""
    base = {"model": "m", "backend": "openai", "base_url": "u", "temperature": 0.0, "seed": 42, "max_tokens": 10,
            "mode": "json_schema", "schema": None, "messages": [{"role": "user", "content": "hi"}]}
    assert cache_key({**base, "temperature": None}) != cache_key(base)
    with FakeOpenAI(routed("low")) as srv:
        model = ModelSpec(backend="openai", name="fake-model", cache="off")
        result = asyncio.run(run_question(method("mdagents"), Q4, model, base_url=srv.base_url))
    calls = {e.step: e for e in result.events if e.kind == "call"}
    assert calls["triage.complexity"].data["sampling"] == {"temperature": None}
    assert "sampling" not in calls["solo.answer"].data


def test_the_azure_path_posts_a_temperature_none_override_as_no_field() -> None:
    """`PostedChat` (the SDK path Azure keeps) drops a None override as the lean client does."""
    from types import SimpleNamespace

    from medpanel.agents.model.backends import PostedChat

    bodies: list[dict[str, Any]] = []

    async def post(path: str, *, body: dict[str, Any], cast_to: Any, options: Any) -> Any:
        bodies.append(body)
        # PostedChat asks for the raw body (read under its bound) and parses it itself.
        assert cast_to is bytes
        return json.dumps(completion('{"answer": "A"}')).encode()

    chat = PostedChat(SimpleNamespace(post=post))  # type: ignore[arg-type]
    asyncio.run(chat.create(model="m", messages=[], temperature=None, seed=42))
    asyncio.run(chat.create(model="m", messages=[], temperature=0.0))
    assert "temperature" not in bodies[0] and bodies[0]["seed"] == 42
    assert bodies[1]["temperature"] == 0.0


def test_the_protocol_line_says_which_mdagents_calls_send_a_temperature() -> None:
    from medpanel.experiments.analysis.protocol import protocol_line

    line = protocol_line({"name": "m", "pipeline": "multiagent", "variants": ["mdagents", "kamac"]})
    assert "temperature 0 on every call that sends one" in line
    assert "mdagents sends a temperature only where its code does" in line and "provider's default" in line
    alone = protocol_line({"name": "k", "pipeline": "kamac"})
    assert "(temperature 0, seed 42" in alone and "provider's default" not in alone
    assert "a seed on every call (model.seed; the code sends none)" in alone
