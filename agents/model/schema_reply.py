"""A reply built from a JSON schema: a value every structured output of the package accepts.

The scripted client (`scripted.py`) and the benchmarks' fake endpoint (`benchmarks/fake_server.py`)
both answer a request with a value valid for its schema; one walk serves both, and every choice it
makes goes through a `Draw`: the scripted model draws from a hash of what it was sent
(`HashedDraw`), the fake endpoint takes the first option (`FirstDraw`).

What the walk honours: objects (nested, every property), arrays (`items`, `prefixItems`, `minItems`,
`maxItems`, `uniqueItems`), `enum`, `const`, `anyOf`/`oneOf` (the first branch that is not null),
`allOf` (merged), `$ref` into `$defs`/`definitions`, a list of types, integers and numbers within
their bounds and `multipleOf`, strings within `minLength`/`maxLength`, a few `format`s, and a
`pattern` in the subset `schema_pattern` reads. A schema it cannot satisfy raises
`SchemaReplyError` naming the keyword and where it sits (`/specialists/0/role`): a clear error, never
a reply that only looks valid.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from medpanel.agents.model.schema_pattern import PatternError, matching

Schema = Mapping[str, Any]
FORMATS = {"date": "2024-01-01", "date-time": "2024-01-01T00:00:00Z", "time": "00:00:00",
           "email": "scripted@example.org", "uri": "https://example.org/scripted",
           "uuid": "00000000-0000-4000-8000-000000000000"}
"""A value for each string `format` pydantic writes for the types a reply could use."""
MAX_DEPTH = 32
T = TypeVar("T")


class SchemaReplyError(ValueError):
    """No value satisfies the schema as this walk reads it (the message names where and why)."""


class Draw(Protocol):
    """Every choice a reply makes; `at` is the value's place (`/specialists/0/role`), so two
    places draw independently and the same place the same way."""

    def choice(self, options: Sequence[T], at: str) -> T:
        """One of `options` (never empty)."""

    def flag(self, at: str) -> bool: ...

    def length(self, low: int, high: int, at: str) -> int:
        """How many items a list holds, `low <= n <= high`."""

    def text(self, name: str, at: str, item: bool) -> str:
        """Free text for the field `name`; `item`: inside a list, where items must differ."""


class HashedDraw:
    """Choices from sha256(seed + place): deterministic, spread over the options, never a fixed one.

    A top-level field `name` hashes `seed + "/" + name` (a list of choices: its first item), as
    the scripted model always has, so a request gets the letters and flags earlier versions drew."""

    def __init__(self, seed: str) -> None:
        self._base = hashlib.sha256(seed.encode())

    def _hash(self, at: str) -> int:
        h = self._base.copy()
        h.update(at.encode())
        return int(h.hexdigest(), 16)

    def choice(self, options: Sequence[T], at: str) -> T:
        return options[self._hash(at) % len(options)]

    def flag(self, at: str) -> bool:
        return bool(self.choice([True, False], at))

    def length(self, low: int, high: int, at: str) -> int:
        return low + self._hash(f"{at}#length") % (high - low + 1)

    def text(self, name: str, at: str, item: bool) -> str:
        # A list's items (a team's roles, a brief's points) carry a tag from the hash, so they differ
        # from each other and from the items of earlier replies (a recruit duplicates no seated role).
        label = f"scripted {name}".rstrip()
        return f"{label} {self._hash(at) % 16**6:06x}" if item else label


class FirstDraw:
    """The plain reply: the first option, `false`, the fewest items, the text "ok"."""

    def choice(self, options: Sequence[T], at: str) -> T:
        return options[0]

    def flag(self, at: str) -> bool:
        return False

    def length(self, low: int, high: int, at: str) -> int:
        return low

    def text(self, name: str, at: str, item: bool) -> str:
        return "ok"


def build(schema: Schema, draw: Draw) -> object:
    """A value valid for `schema` (a JSON schema, `$defs` at its root), its choices made by `draw`."""
    return _Walk(schema, draw).value(schema, "", "", item=False, depth=0)


class _Walk:
    def __init__(self, root: Schema, draw: Draw) -> None:
        self.root = root
        self.draw = draw

    def refuse(self, at: str, why: str) -> SchemaReplyError:
        return SchemaReplyError(f"no reply can be built at {at or '/'}: {why}")

    def resolve(self, node: Schema, at: str, depth: int) -> Schema:
        """`node` with its `$ref`, `allOf` and `anyOf`/`oneOf` read, down to one plain schema."""
        if depth > MAX_DEPTH:
            raise self.refuse(at, f"the schema nests deeper than {MAX_DEPTH} levels (a recursive $ref?)")
        if "$ref" in node:
            target = self.follow(str(node["$ref"]), at)
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return self.resolve({**target, **rest}, at, depth + 1)
        if "allOf" in node:
            merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
            for part in node["allOf"]:
                part = self.resolve(part, at, depth + 1)
                props = {**merged.get("properties", {}), **part.get("properties", {})}
                merged.update(part)
                if props:  # each part's properties, all of them (the value must satisfy every part)
                    merged["properties"] = props
            return self.resolve(merged, at, depth + 1)
        for key in ("anyOf", "oneOf"):
            if key in node:
                branches = [b for b in node[key] if not (isinstance(b, Mapping) and b.get("type") == "null")]
                if not branches:
                    return {"type": "null"}
                rest = {k: v for k, v in node.items() if k != key}
                return self.resolve({**rest, **branches[0]}, at, depth + 1)
        return node

    def follow(self, ref: str, at: str) -> Schema:
        if not ref.startswith("#/"):
            raise self.refuse(at, f"$ref {ref!r} points outside the schema")
        node: object = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise self.refuse(at, f"$ref {ref!r} names nothing in the schema")
            node = node[part]
        if not isinstance(node, Mapping):
            raise self.refuse(at, f"$ref {ref!r} is not a schema")
        return node

    def value(self, node: Schema, at: str, name: str, *, item: bool, depth: int) -> object:
        node = self.resolve(node, at, depth)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            if not node["enum"]:
                raise self.refuse(at, "an empty enum")
            return self.draw.choice(list(node["enum"]), at)
        kind = self.kind(node)
        if kind == "object":
            return {k: self.value(v, f"{at}/{k}", k, item=item, depth=depth + 1)
                    for k, v in node.get("properties", {}).items()}
        if kind == "array":
            return self.array(node, at, name, depth)
        if kind == "boolean":
            return self.draw.flag(at)
        if kind in ("integer", "number"):
            return number(node, integer=kind == "integer", where=at)
        if kind == "null":
            return None
        return self.string(node, at, name, item=item)

    def kind(self, node: Schema) -> str:
        t = node.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), "null")
        if t is None:
            if "properties" in node:
                return "object"
            if "items" in node or "prefixItems" in node:
                return "array"
            return "string"
        return str(t)

    def array(self, node: Schema, at: str, name: str, depth: int) -> list[object]:
        low, high = int(node.get("minItems", 0)), node.get("maxItems")
        if high is not None and int(high) < low:
            raise self.refuse(at, f"maxItems {high} is below minItems {low}")
        low = max(low, 1) if high is None or int(high) >= 1 else 0
        prefix = list(node.get("prefixItems", []))
        items = node.get("items", {})
        out = [self.value(p, f"{at}/{i}", name, item=True, depth=depth + 1) for i, p in enumerate(prefix)]
        if items is False:  # a closed tuple: its prefix items and no more
            return out
        rest = self.resolve(items, at, depth + 1) if isinstance(items, Mapping) else {}
        options = [rest["const"]] if "const" in rest else list(rest.get("enum", []))
        if options:
            # A list of choices (letters, expert numbers) holds as few items as allowed, each
            # different: a multi-answer question gets one letter, as a list. The first draws at the
            # list's own place, as the scripted model always has, so its letter is the one drawn before.
            for i in range(len(out), max(low, len(out))):
                left = [o for o in options if o not in out] or options
                out.append(self.draw.choice(left, f"{at}/{i}" if i else at))
        else:
            # A list of numbers or flags holds as few as allowed too (a brief point's passage
            # numbers); a list of objects or text (a team, a brief's points) holds between its
            # minimum and two more, drawn.
            cap = low if self.kind(rest) in ("integer", "number", "boolean") else low + 2
            cap = cap if high is None else min(int(high), cap)
            n = self.draw.length(low, max(cap, low), at)
            out += [self.value(rest, f"{at}/{i}", name, item=True, depth=depth + 1) for i in range(len(out), n)]
        if node.get("uniqueItems") and len({repr(v) for v in out}) < len(out):
            raise self.refuse(at, f"uniqueItems with only {len({repr(v) for v in out})} distinct values to draw")
        return out

    def string(self, node: Schema, at: str, name: str, *, item: bool) -> str:
        low, high = int(node.get("minLength", 0)), node.get("maxLength")
        if "pattern" in node:
            try:
                text = matching(str(node["pattern"]))
            except PatternError as exc:
                raise self.refuse(at, str(exc)) from None
            if len(text) < low or (high is not None and len(text) > int(high)):
                raise self.refuse(at, f"the pattern's match {text!r} is outside minLength {low} / maxLength {high}")
            return text
        text = FORMATS.get(str(node.get("format", "")), self.draw.text(name, at, item))
        if len(text) < low:
            text += "." * (low - len(text))
        if high is not None and len(text) > int(high):
            if "format" in node:
                raise self.refuse(at, f"format {node['format']} needs more than maxLength {high}")
            text = text[: int(high)]
        return text


def number(node: Schema, *, integer: bool, where: str = "") -> int | float:
    """1 where the bounds allow it, else the value nearest a bound that they and `multipleOf` allow."""
    low, high, step = node.get("minimum"), node.get("maximum"), node.get("multipleOf")
    low_x, high_x = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")

    def allowed(v: float) -> bool:
        return ((low is None or v >= low) and (high is None or v <= high) and (low_x is None or v > low_x)
                and (high_x is None or v < high_x) and (not integer or v == int(v))
                and (not step or abs(v / step - round(v / step)) < 1e-9))

    near = [b for b in (low, low_x, high, high_x) if b is not None]
    candidates: list[float] = [1]
    for b in near:
        base = math.ceil(b) if integer else b
        candidates += [base, base + 1, base - 1, b + 1e-6, b - 1e-6]
    if step:
        candidates += [math.ceil(c / step) * step for c in list(candidates)]
        candidates += [math.floor(c / step) * step for c in list(candidates)]
    for c in candidates:
        if allowed(c):
            return int(c) if integer else float(c)
    raise SchemaReplyError(f"no reply can be built at {where or '/'}: no {'integer' if integer else 'number'} "
                           f"satisfies minimum {low}, maximum {high}, exclusiveMinimum {low_x}, "
                           f"exclusiveMaximum {high_x}, multipleOf {step}")
