"""The strict response format medpanel sends is the openai SDK's, key for key and in the same order,
built without importing the SDK (half a second in every process that makes a call)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from enum import Enum
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from medpanel.agents.model.strict_schema import strict_format
from medpanel.agents.model.structured import answer_model


def sdk_format(model: type[BaseModel]) -> dict[str, Any]:
    from openai.lib._parsing._completions import type_to_response_format_param

    return dict(type_to_response_format_param(model))  # type: ignore[arg-type]


class Colour(str, Enum):
    red = "red"
    blue = "blue"


class Inner(BaseModel):
    """An item with a description, so a `$ref` beside other keys must be inlined."""

    name: str
    score: float | None = None


class Edges(BaseModel):
    inner: Inner = Field(description="described: its $ref sits beside a description")
    items: list[Inner]
    maybe: Inner | None = None
    colour: Colour = Colour.red
    letters: set[Literal["A", "B"]] = Field(min_length=1)
    pair: tuple[int, str]
    nested: dict[str, list[int]] = Field(default_factory=dict)


def product_models() -> list[type[BaseModel]]:
    """Every pydantic model the product's agents and methods define (the reply models among them)."""
    for root in ("medpanel.agents", "medpanel.methods"):
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}."):
            importlib.import_module(info.name)
    found: list[type[BaseModel]] = []
    todo = list(BaseModel.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("medpanel.") and not cls.__pydantic_generic_metadata__["parameters"]:
            found.append(cls)
    return found


CASES: list[type[BaseModel]] = [Edges, Inner, answer_model(["A", "B", "C", "D"]),
                                answer_model(["A", "B"], multi=True), answer_model(["A", "B", "C"], reasoning=False)]


@pytest.mark.parametrize("model", CASES, ids=lambda m: m.__name__)
def test_the_format_is_the_sdks_byte_for_byte(model: type[BaseModel]) -> None:
    assert json.dumps(strict_format(model)) == json.dumps(sdk_format(model))


def test_every_model_of_the_product_gets_the_sdks_format() -> None:
    models = product_models()
    assert len(models) >= 10  # the walk found the reply models, not an empty list
    for model in models:
        assert json.dumps(strict_format(model)) == json.dumps(sdk_format(model)), model


def test_building_a_format_does_not_import_the_sdk() -> None:
    code = ("import sys; from medpanel.agents.model.structured import answer_model, strict_response_format; "
            "strict_response_format(answer_model(['A', 'B'])); print('openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
