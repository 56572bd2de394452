"""Replies built from a JSON schema (`agents/model/schema_reply.py`): the scripted model's and the fake
endpoint's. Every shape a reply model can have gets a value the model accepts; choices are drawn
from the request, the same request gets the same reply, and what cannot be built is refused."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from medpanel.agents.model.schema_pattern import PatternError, matching
from medpanel.agents.model.schema_reply import FirstDraw, HashedDraw, SchemaReplyError, build
from medpanel.agents.model.scripted import synthesize
from medpanel.agents.model.structured import answer_model, strict_response_format
from medpanel.methods.panel.roles.selector import TeamChoice

from .multiagent_helpers import method, steps
from .scripted_helpers import Q4


class Point(BaseModel):
    text: str = Field(min_length=12)
    sources: list[int] = Field(min_length=1)
    weight: float = Field(gt=0, le=0.5)


class Verdict(BaseModel):
    kind: Literal["support", "refute"]


class Shapes(BaseModel):
    """One of each shape: nested objects, lists of objects with bounds, enum, const, optional,
    pattern, bounded integers, a set of letters and a tuple."""

    points: list[Point] = Field(min_length=5, max_length=8)
    verdict: Verdict
    maybe: Verdict | None = None
    agreed: Literal["B"]
    code: str = Field(pattern=r"^[A-Z]\d{2}(\.\d+)?$")
    tag: str = Field(pattern=r"(?:sep|oct)-[a-z]{3,}")
    count: int = Field(ge=3, le=7, multiple_of=3)
    letters: set[Literal["A", "B", "C"]] = Field(min_length=2)
    pair: tuple[int, str]
    short: str = Field(max_length=4)


@pytest.mark.parametrize("draw", [HashedDraw("seed"), FirstDraw()], ids=["hashed", "first"])
def test_every_shape_gets_a_value_the_model_accepts(draw: Any) -> None:
    value = build(Shapes.model_json_schema(), draw)
    parsed = Shapes.model_validate(value)
    assert parsed.agreed == "B" and 5 <= len(parsed.points) <= 8 and parsed.count in (3, 6)
    # The strict format an endpoint is sent (every field required, `$defs` at the root) as well.
    strict = strict_response_format(Shapes)["json_schema"]["schema"]
    Shapes.model_validate(build(strict, draw))


HAND_WRITTEN: dict[str, Any] = {
    "type": "object",
    "definitions": {"Item": {"type": "object", "properties": {"id": {"type": ["integer", "null"], "minimum": 2}}}},
    "properties": {
        "merged": {"allOf": [{"type": "object", "properties": {"a": {"const": 1}}},
                             {"properties": {"b": {"enum": ["x", "y"]}}}], "required": ["a", "b"]},
        "either": {"oneOf": [{"type": "null"}, {"type": "string", "minLength": 3, "maxLength": 5}]},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "items": False},
        "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}, "minItems": 2, "maxItems": 3},
        "when": {"type": "string", "format": "date-time"},
        "ratio": {"type": "number", "exclusiveMinimum": 1, "maximum": 2, "multipleOf": 0.25},
        "picks": {"type": "array", "items": {"enum": ["A", "B", "C"]}, "minItems": 2, "uniqueItems": True},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
    },
}


@pytest.mark.parametrize("draw", [HashedDraw("seed"), FirstDraw()], ids=["hashed", "first"])
def test_a_hand_written_schema_gets_a_value_a_json_schema_validator_accepts(draw: Any) -> None:
    """Shapes pydantic does not write (allOf, oneOf, a list of types, a closed tuple, `definitions`),
    checked by jsonschema (installed by the dev extra's nbformat), formats included."""
    import jsonschema

    value = build(HAND_WRITTEN, draw)
    jsonschema.Draft202012Validator(HAND_WRITTEN, format_checker=jsonschema.FormatChecker()).validate(value)
    assert value["merged"] == {"a": 1, "b": value["merged"]["b"]} and len(value["pair"]) == 2


def test_the_scripted_team_has_distinct_roles_drawn_from_the_request() -> None:
    """The selector's and the recruiter's reply: specialists as objects, each role its own label
    (a recruiter's never the selector's), the same request the same team."""
    teams = [TeamChoice.model_validate(synthesize(TeamChoice, f"request {i}")) for i in range(40)]
    roles = [s.role for t in teams for s in t.specialists]
    assert len(set(roles)) == len(roles)
    assert {len(t.specialists) for t in teams} == {1, 2, 3}  # between the minimum and two more
    assert synthesize(TeamChoice, "request 7") == teams[7].model_dump()


def test_answer_letters_are_drawn_from_the_request_as_before() -> None:
    """A top-level choice hashes seed + "/" + field, as the scripted model always has, so the letters
    of runs made before stay the letters; over many requests every option is drawn."""
    letters = ["A", "B", "C", "D"]
    model = answer_model(letters)
    drawn = [synthesize(model, f"q{i}")["answer"] for i in range(60)]
    expected = [letters[int(hashlib.sha256(f"q{i}/answer".encode()).hexdigest(), 16) % 4] for i in range(60)]
    assert drawn == expected and set(drawn) == set(letters)
    multi = answer_model(letters, multi=True)  # one letter, as a list: the same one
    assert [synthesize(multi, f"q{i}")["answer"] for i in range(60)] == [[x] for x in expected]
    assert TeamChoice.model_validate(synthesize(TeamChoice, "q1"))  # nested objects in the same walk


@pytest.mark.parametrize("pattern", [r"^[A-E](,[A-E])*$", r"\d{3}-[a-z]{2,}", r"(?:foo|bar)+baz", r"[^a-z]+",
                                     r"^\w+@\w+\.org$", r"ICD-?[0-9A-Z]{3}(\.\d)?", r"^(?P<y>\d{4})-\d\d$",
                                     r"a\.b\s?c[\]x]", "plain"])
def test_a_pattern_in_the_subset_gets_a_matching_string(pattern: str) -> None:
    assert re.search(pattern, matching(pattern))


@pytest.mark.parametrize(("pattern", "named"), [(r"(?=a)b", "(?="), (r"(a)\1", r"\1"), (r"\bword", r"\b"),
                                                (r"[z-a]", "range"), (r"(ab", "unclosed group")])
def test_a_pattern_outside_the_subset_is_refused_naming_what(pattern: str, named: str) -> None:
    with pytest.raises(PatternError, match=re.escape(named)):
        matching(pattern)
    schema = {"type": "object", "properties": {"team": {"type": "array", "minItems": 1, "items": {
        "type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}}}}
    with pytest.raises(SchemaReplyError, match=r"^no reply can be built at /team/0/code: "):
        build(schema, HashedDraw("s"))


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "integer", "minimum": 4, "maximum": 5, "multipleOf": 3}, "no integer satisfies"),
    ({"type": "array", "minItems": 3, "maxItems": 2, "items": {"type": "string"}}, "maxItems 2 is below minItems 3"),
    ({"type": "array", "minItems": 2, "uniqueItems": True, "items": {"const": 1}}, "uniqueItems"),
    ({"$ref": "#/$defs/Missing"}, "names nothing"),
    ({"$ref": "#/$defs/Loop", "$defs": {"Loop": {"$ref": "#/$defs/Loop"}}}, "recursive"),
])
def test_a_schema_no_value_satisfies_is_refused(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(SchemaReplyError, match=re.escape(why)):
        build(schema, FirstDraw())


def test_an_all_agree_mdagents_moderator_over_http_is_answered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake endpoint's every reply is valid the first time, so no call is re-asked: MDAgents'
    moderate path with a silent first turn is 1 + 1 + 5 + 5 + 1 + 5 + 5 + 1 = 24 requests. The
    moderator is offered every option, as MDAgents' code offers them (an `enum`), and the fake
    endpoint answers a `const` field with its one value (posted over HTTP below)."""
    from medpanel.agents.model.spec import ModelSpec
    from medpanel.agents.pipelines.run import run_question

    from .fake_openai import FakeOpenAI, completion, schema_reply

    def moderate(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        reply = schema_reply(body)
        if "complexity" in reply:
            reply["complexity"] = "moderate"
        return 200, {}, completion(json.dumps(reply))

    monkeypatch.setenv("MP_TEST_KEY", "sk-test")
    with FakeOpenAI(moderate) as srv:
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, api_key_env="MP_TEST_KEY",
                         cache="off")
        result = asyncio.run(run_question(method("mdagents"), Q4, spec))
        schemas = [b["response_format"]["json_schema"]["schema"] for b in srv.requests]
    assert steps(result)[-1] == "decision.moderator" and result.summary["ended_by"] == "silence"
    assert len(srv.requests) == 24
    assert schemas[-1]["properties"]["answer"]["enum"] == ["A", "B", "C", "D"]  # every option, as the code
    assert result.summary["rule"] == "moderator" and result.answer == ("A",)


def test_the_fake_endpoint_answers_a_const_field_with_its_value() -> None:
    """Over HTTP: a field that allows one value gets that value, not the first letter or a default."""
    import urllib.request

    from .fake_openai import FakeOpenAI, completion, schema_reply

    schema = {"type": "object", "properties": {"answer": {"const": "C"}, "n": {"const": 3}},
              "required": ["answer", "n"]}
    body = {"model": "m", "messages": [], "response_format": {"type": "json_schema",
                                                               "json_schema": {"name": "r", "schema": schema}}}
    with FakeOpenAI(lambda b, n: (200, {}, completion(json.dumps(schema_reply(b))))) as srv:
        request = urllib.request.Request(f"{srv.base_url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            content = json.loads(reply.read())["choices"][0]["message"]["content"]
    assert json.loads(content) == {"answer": "C", "n": 3}
