"""Prompt files and the question text every role is shown.

A prompt file sits beside the module that renders it, named `<module>.<part>.md`: the Challenger's
system prompt is `agents/roles/challenger.system.md`, next to `challenger.py`. Templates use
`str.format` fields (`{question}`), and a rendered prompt is stripped of surrounding whitespace.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from medpanel.agents.types import Question


class Prompts:
    """The prompt files of one module (pass `__name__`)."""

    def __init__(self, module: str) -> None:
        self.package, _, self.stem = module.rpartition(".")

    def text(self, part: str) -> str:
        return _read(self.package, f"{self.stem}.{part}.md")

    def render(self, part: str, **values: Any) -> str:
        return self.text(part).format_map(values).strip()


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
