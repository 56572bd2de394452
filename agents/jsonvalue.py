"""The shape of a JSON document, for values read from or written to JSON whose keys are not fixed.

A payload with a known shape gets a `TypedDict` of its own; these aliases are for the rest (a model's
free-form reply, a settings block passed through). Readers narrow a `JSONValue` with `isinstance`, or
`cast` it at the boundary where the shape is known (right after `json.loads`).
"""

from __future__ import annotations

from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]
"""A JSON object: what `json.loads` gives for `{...}`."""
