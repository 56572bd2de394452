"""Prompt files and the question text every role is shown.

A prompt file sits beside the module that renders it, named `<module>.<part>.md`: the Challenger's
system prompt is `methods/panel/roles/challenger.system.md`, next to `challenger.py`. Templates use
`str.format` fields (`{question}`), and a rendered prompt is stripped of surrounding whitespace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from medpanel.agents.types import Question


class Prompts:
    """The prompt files of one module (pass `__name__`)."""

    def __init__(self, module: str) -> None:
        self.package, _, self.stem = module.rpartition(".")

    def text(self, part: str) -> str:
        override = _OVERRIDES.get().get(f"{self.stem}.{part}")
        if override is not None:
            return override
        return _read(self.package, f"{self.stem}.{part}.md")

    def render(self, part: str, **values: Any) -> str:
        return self.text(part).format_map(values).strip()

    def request(self, question: Question, part: str = "request", *, system: Sequence[str] = ("system",),
                **values: Any) -> Request:
        """A fresh role's whole request in one call: its system prompt (the `system` parts, a line
        each) and the `part` rendered with the question as `{question}` and `values`."""
        return Request(system="\n".join(map(self.render, system)),
                       text=self.render(part, question=format_question(question), **values))


@dataclass(frozen=True)
class Request:
    """What a fresh role agent is asked: its system prompt and its first message."""

    system: str
    text: str


_OVERRIDES: ContextVar[Mapping[str, str]] = ContextVar("prompt_overrides",
                                                                       default=MappingProxyType({}))
"""`<stem>.<part>` -> template text replacing that prompt file (a scenario's `prompts:` / a prompt
variant). A context variable, not a global: workers run questions of different variants at once,
and tasks a pipeline starts inherit the question's overrides."""


@contextmanager
def prompt_overrides(texts: Mapping[str, str]) -> Iterator[None]:
    """Render prompts with `texts` in place of their files for the duration of the block."""
    token = _OVERRIDES.set(dict(texts))
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


@cache
def _read(package: str, name: str) -> str:
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


PROMPTS = Prompts(__name__)


def format_question(q: Question) -> str:
    opts = "\n".join(f"({k}) {v}" for k, v in q.options.items())
    kind = "Select ALL correct options." if q.multi_answer else "Select the single best option."
    return f"Question:\n{q.text}\n\nOptions:\n{opts}\n\n{kind}"


def question_block(q: Question) -> str:
    """A question as CLEAR's roles see it: the options for MCQ, the conversation for free text."""
    if q.options:
        return format_question(q)
    return PROMPTS.render("freetext_question", conversation=q.text)
