"""What a pipeline is, and the registry that maps `pipeline:` names to implementations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.settings import PipelineSettings
from medpanel.agents.types import Condition, Question

__all__ = ["PIPELINES", "Outcome", "Pipeline", "PipelineSettings", "get_pipeline", "register"]


@dataclass
class Outcome:
    """A pipeline's verdict on one question; the runner scores it and stores the transcript."""

    answer: tuple[str, ...] = ()
    invalid: bool = False
    summary: dict[str, Any] = field(default_factory=dict)


class Pipeline(Protocol):
    settings_model: type[PipelineSettings]
    flags: tuple[str, ...]
    """Flag names the pipeline understands; others in a scenario are an error."""

    async def __call__(self, question: Question, condition: Condition, session: QuestionSession,
                       settings: Any) -> Outcome: ...


PIPELINES: dict[str, Callable[[], Pipeline]] = {}


def register(name: str) -> Callable[[Callable[[], Pipeline]], Callable[[], Pipeline]]:
    def deco(factory: Callable[[], Pipeline]) -> Callable[[], Pipeline]:
        PIPELINES[name] = factory
        return factory

    return deco


def get_pipeline(name: str) -> Pipeline:
    # Importing the package registers the built-in pipelines.
    import medpanel.agents.pipelines  # noqa: F401

    if name not in PIPELINES:
        raise KeyError(name)
    return PIPELINES[name]()
