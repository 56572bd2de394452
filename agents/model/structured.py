"""Structured outputs: pydantic reply models, their prompt text, and a tolerant parser.

The answer field of every model is a `Literal` over the question's own letters, so a reply that
names a letter outside the options fails validation instead of being scored.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Literal, TypeVar, cast

from pydantic import BaseModel, Field, ValidationError, create_model, model_validator
from pydantic.json_schema import SkipJsonSchema

from medpanel.agents.model.strict_schema import strict_format

R = TypeVar("R", bound=BaseModel)
"""A reply model: `RoleAgent.speak(text, M)` returns an `M` (or None when the reply is invalid twice)."""


def letters_type(letters: Sequence[str]) -> Any:
    return Literal[tuple(letters)]


BRIEF_REASONING = "Brief reasoning, at most 4 sentences."
FREE_REASONING = "Your step-by-step reasoning, as long as the question needs."
"""For a reply sent with no length cap (a method whose original sets none): its reasoning is not cut short."""


class AnswerReply(BaseModel):
    """What every answer reply holds: an `answer` (a letter, a list of letters, or free text where a
    question has no options; each reply model narrows it) and the `reasoning` before it.

    The fields here only fix the order (reasoning first) and the type code reads; each model built
    from this base redeclares both with its own constraints and descriptions."""

    reasoning: str
    answer: str | list[str]


class BareAnswer(AnswerReply):
    """An answer asked without reasoning: neither the schema the model is shown nor the record
    carries `reasoning`, and it reads "" (a `reasoning` key in the reply is ignored, as any key the
    model was not asked for is)."""

    reasoning: SkipJsonSchema[str] = Field(default="", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _not_asked(cls, data: object) -> object:
        return {k: v for k, v in data.items() if k != "reasoning"} if isinstance(data, dict) else data


class Slots(BaseModel):
    """A reply with numbered string fields `<prefix>_1` ... `<prefix>_n` (a specialty each), read as
    the list `slots`. Small models fill named slots far more reliably than a list of a given length,
    so the schema keeps the slots and code reads the list."""

    @property
    def slots(self) -> list[str]:
        """The numbered fields' values, in order (other fields, e.g. a count, are not slots)."""
        return [str(value) for key, value in self if _SLOT.fullmatch(key)]


_SLOT = re.compile(r"[a-z]+_\d+")


def answer_model(letters: list[str], *, multi: bool = False, name: str = "Answer",
                 reasoning: bool = True, reasoning_hint: str = BRIEF_REASONING) -> type[AnswerReply]:
    """A reply with (optional) reasoning and an answer constrained to `letters`.

    One class per distinct shape: building a pydantic model and its schema costs milliseconds,
    paid on every question otherwise, and a benchmark has few distinct option sets.
    """
    return _answer_model(tuple(letters), multi, name, reasoning, reasoning_hint)


@functools.lru_cache(maxsize=256)
def _answer_model(letters: tuple[str, ...], multi: bool, name: str, reasoning: bool,
                  hint: str = BRIEF_REASONING) -> type[AnswerReply]:
    fields: dict[str, Any] = {}
    if reasoning:
        # Reasoning comes first so a model that writes fields in order thinks before it answers.
        fields["reasoning"] = (str, Field(description=hint))
    if multi:
        fields["answer"] = (list[letters_type(letters)], Field(min_length=1, description="All correct letters."))  # type: ignore[misc]
    else:
        fields["answer"] = (letters_type(letters), Field(description="The single best option letter."))
    return create_model(name, __base__=AnswerReply if reasoning else BareAnswer, **fields)


def letters_of(parsed: AnswerReply) -> tuple[str, ...]:
    """The letters of a parsed `answer_model` reply, sorted and unique (one letter or a list)."""
    ans = parsed.answer
    return tuple(sorted(set(ans))) if isinstance(ans, list) else (ans,)


@functools.lru_cache(maxsize=512)
def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema, generated once per class (pydantic rebuilds it on every call).

    Shared: callers must copy before changing it."""
    return model.model_json_schema()


def fields_of(model: type[BaseModel]) -> list[tuple[str, dict[str, Any]]]:
    """A reply model's top-level fields with their schemas: a `$ref` followed, an optional's `null`
    branch dropped."""
    schema = schema_of(model)
    defs = schema.get("$defs", {})
    out = []
    for key, prop in schema.get("properties", {}).items():
        if "$ref" in prop:
            prop = defs.get(prop["$ref"].split("/")[-1], {})
        if "anyOf" in prop:
            prop = next((p for p in prop["anyOf"] if p.get("type") != "null"), {})
        out.append((key, prop))
    return out


def _example_value(prop: dict[str, Any], key: str, defs: dict[str, Any] | None = None) -> object:
    # Placeholders in angle brackets: tiny models copy a literal example ("...", "A|B|C|D")
    # verbatim, but fill in a slot that reads like one.
    if "enum" in prop:
        return f"<one of {', '.join(str(x) for x in prop['enum'])}>"
    if "const" in prop:
        return prop["const"]
    t = prop.get("type")
    if t == "boolean":
        return "<true or false>"
    if "$ref" in prop and defs is not None:
        return _example_value(defs.get(prop["$ref"].split("/")[-1], {}), key, defs)
    if t == "object" or "properties" in prop:
        return {k: _example_value(v, k, defs) for k, v in prop.get("properties", {}).items()}
    if t == "array":
        return [_example_value(prop.get("items", {}), key, defs)]
    if t == "integer":
        return "<number>"
    return f"<{key.replace('_', ' ')}>"


@functools.lru_cache(maxsize=512)
def format_instructions(model: type[BaseModel]) -> str:
    """The JSON shape in words, appended to every structured request whatever the API mode.

    Small models follow an example far better than a JSON schema.
    """
    defs = schema_of(model).get("$defs", {})
    shape: dict[str, object] = {}
    notes = []
    for key, prop in fields_of(model):
        shape[key] = _example_value(prop, key, defs)
        if prop.get("description"):
            notes.append(f"- {key}: {prop['description']}")
    body = json.dumps(shape, ensure_ascii=False)
    return "Reply with only a JSON object of this shape:\n" + body + ("\n" + "\n".join(notes) if notes else "")


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_BRACE = re.compile(r"[{}]")


def parse_reply(text: str, model: type[R]) -> tuple[R | None, str | None]:
    """Validate a reply; returns (parsed, None) or (None, reason).

    Accepts a bare object, one inside a code fence, or the first balanced `{...}` in prose, since
    prompt-mode models wrap JSON in chatter. It never guesses a letter from free text.
    The candidates are tried in that order; the fences and the braces are looked for only when the
    bare reply is not a valid object (most replies are), since scanning a long reasoning for them
    costs more than validating it.
    """
    reason = "no JSON object found"
    for cand in _candidates(text):
        if not cand.startswith("{"):
            continue
        try:
            return model.model_validate_json(cand), None
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            reason = f"{loc or 'reply'}: {first['msg']}" if first["type"] != "json_invalid" else "invalid JSON"
    return None, reason


def _candidates(text: str) -> Iterator[str]:
    """The reply as it stands, then (only if asked for more) each code fence's content, then the
    first balanced `{...}`."""
    yield text.strip()
    yield from [m.strip() for m in _FENCE.findall(text)]
    start = text.find("{")
    if start >= 0:
        depth = 0
        for brace in _BRACE.finditer(text, start):
            depth += 1 if brace.group() == "{" else -1
            if depth == 0:
                yield text[start : brace.end()]
                return


def reask_message(reason: str, model: type[BaseModel]) -> str:
    return f"Your reply could not be used ({reason}). {format_instructions(model)}"


# -- the response formats sent to an endpoint ---------------------------------------------------


@functools.lru_cache(maxsize=512)
def strict_response_format(model: type[BaseModel]) -> dict[str, object]:
    """OpenAI's strict `json_schema` response format for a pydantic model (what `parse` would send),
    built without importing the SDK (`strict_schema`)."""
    return strict_format(model)


@functools.lru_cache(maxsize=512)
def capped_schema(model: type[BaseModel], cap: int | None) -> dict[str, object]:
    return cap_strings(schema_of(model), cap)


def cap_strings(schema: dict[str, object], cap: int | None) -> dict[str, object]:
    """Add `maxLength` to every free-text string of a JSON schema (enums and consts are left alone)."""
    if cap is None:
        return schema

    def walk(node: object) -> object:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items()}
            if out.get("type") == "string" and "enum" not in out and "const" not in out:
                out.setdefault("maxLength", cap)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return cast("dict[str, object]", walk(schema))  # a dict walks to a dict
