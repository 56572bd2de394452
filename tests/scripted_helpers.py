"""Helpers for scripted-model tests: run one (condition, question) with a responder function."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from medpanel.agents.model.cache import ResponseCache
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.run import run_question
from medpanel.agents.types import Condition, Question, QuestionResult

Q4 = Question(dataset="unit", qid="q1", text="A 30-year-old has chest pain. Best next step?",
              options={"A": "ECG", "B": "Discharge", "C": "MRI", "D": "Antibiotics"}, gold=("A",))
QMULTI = Question(dataset="unit", qid="m1", text="Which are beta-lactams?",
                  options={"A": "Amoxicillin", "B": "Gentamicin", "C": "Ceftriaxone", "D": "Doxycycline"},
                  gold=("A", "C"), multi_answer=True)


def run(condition: Condition, question: Question, responder: Callable[[ScriptedRequest], Any],
        cache: ResponseCache | None = None, **spec: Any) -> tuple[QuestionResult, ScriptedChatCompletionClient]:
    client = ScriptedChatCompletionClient(responder)
    model = ModelSpec(backend="scripted", cache="run" if cache is not None else "off", **spec)
    result = asyncio.run(run_question(condition, question, model, cache=cache, client_factory=lambda s: client))
    return result, client


def cond(pipeline: str, **flags: int | str) -> Condition:
    from medpanel.experiments.run.scenario.scenario import slug_for

    return Condition(slug=slug_for(flags) or pipeline, pipeline=pipeline, flags=flags)
