"""Shared helpers for the published multi-agent methods' tests: conditions, the call steps of a
result, and a scripted responder by step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.model.structured import fields_of
from medpanel.agents.types import Condition, QuestionResult


def stage_of(step: str) -> str:
    """The stage of a call's step (`vote.attempt` -> `vote`; a re-ask keeps its stage)."""
    return step.split(":")[0].split(".")[0]


def method(name: str, variant: str | None = None, **settings: Any) -> Condition:
    flags: dict[str, Any] = {"variant": variant} if variant else {}
    return Condition(slug=f"{name}-{variant}" if variant else name, pipeline=name, settings=settings, flags=flags)


def steps(result: QuestionResult) -> list[str]:
    return [e.step for e in result.events if e.kind == "call"]


def stages(result: QuestionResult) -> list[str]:
    out: list[str] = []
    for s in steps(result):
        if not out or out[-1] != stage_of(s):
            out.append(stage_of(s))
    return out


def sent(client: ScriptedChatCompletionClient, step: str, **tag: Any) -> list[ScriptedRequest]:
    """The requests of one step, optionally of one agent / round / turn."""
    return [r for r in client.requests if r.tag.step == step and all(getattr(r.tag, k) == v for k, v in tag.items())]


def seen_by(client: ScriptedChatCompletionClient, agent: str, token: str) -> bool:
    """Did any request by `agent` carry `token` anywhere in its messages?"""
    return any(token in str(m.get("content", "")) for r in client.requests if r.tag.agent == agent
               for m in r.messages)


def reply(rules: dict[str, Callable[[ScriptedRequest], Any] | dict[str, Any]]) -> Callable[[ScriptedRequest], Any]:
    """A responder by step (`vote.expert`), falling back to a schema-valid default per field
    (answers "A", the first enum value, booleans false, strings naming the step)."""

    def respond(r: ScriptedRequest) -> Any:
        rule = rules.get(r.tag.step)
        if callable(rule):
            return rule(r)
        if rule is not None:
            return rule
        out: dict[str, Any] = {}
        for name, prop in (fields_of(r.model) if r.model else []):
            if name == "answer":
                out[name] = "A"
            elif "enum" in prop:
                out[name] = prop["enum"][0]
            elif prop.get("type") == "boolean":
                out[name] = False
            else:
                out[name] = f"{r.tag.step} {name}"
        return out

    return respond
