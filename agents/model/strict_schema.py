"""OpenAI's strict `json_schema` response format for a pydantic model, without importing the SDK.

The same transformation as the openai SDK's `type_to_response_format_param` (what its `parse`
sends): every object closed (`additionalProperties: false`) with all its properties required,
`None` defaults dropped, a `$ref` beside other keys inlined. Built here because importing the SDK
for it cost half a second of CPU in every process that makes a call, where the call path itself
never needs the SDK (`tests/test_strict_schema.py` checks it against the SDK's, key for key).
"""

from __future__ import annotations

from pydantic import BaseModel

_ABSENT = object()


def strict_format(model: type[BaseModel]) -> dict[str, object]:
    """`{"type": "json_schema", "json_schema": {"schema", "name", "strict"}}` for `model`."""
    schema = model.model_json_schema()
    return {"type": "json_schema",
            "json_schema": {"schema": _strict(schema, root=schema), "name": model.__name__, "strict": True}}


def _strict(node: object, *, root: dict[str, object]) -> dict[str, object]:
    """Mutates `node` (a JSON schema) in place, as the SDK does, and returns it."""
    if not isinstance(node, dict):
        raise TypeError(f"expected a JSON schema object, got {node!r}")
    for key in ("$defs", "definitions"):
        defs = node.get(key)
        if isinstance(defs, dict):
            for sub in defs.values():
                _strict(sub, root=root)
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False
    properties = node.get("properties")
    if isinstance(properties, dict):
        node["required"] = list(properties)
        node["properties"] = {k: _strict(v, root=root) for k, v in properties.items()}
    items = node.get("items")
    if isinstance(items, dict):
        node["items"] = _strict(items, root=root)
    any_of = node.get("anyOf")
    if isinstance(any_of, list):
        node["anyOf"] = [_strict(v, root=root) for v in any_of]
    all_of = node.get("allOf")
    if isinstance(all_of, list):
        if len(all_of) == 1:
            node.update(_strict(all_of[0], root=root))
            node.pop("allOf")
        else:
            node["allOf"] = [_strict(v, root=root) for v in all_of]
    if node.get("default", _ABSENT) is None:
        node.pop("default")  # still nullable; the model defaults to None anyway
    ref = node.get("$ref")
    if ref and len(node) > 1:
        # A `$ref` may not sit beside other keys: inline it, the node's own keys taking priority.
        resolved = _resolve(root, ref)
        node.update({**resolved, **node})
        node.pop("$ref")
        return _strict(node, root=root)
    return node


def _resolve(root: dict[str, object], ref: object) -> dict[str, object]:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise ValueError(f"unexpected $ref {ref!r}: only local references (#/...) are resolved")
    resolved: dict[str, object] = root
    for key in ref[2:].split("/"):
        value = resolved[key]
        if not isinstance(value, dict):
            raise ValueError(f"$ref {ref} does not resolve to a schema object")
        resolved = value
    return resolved
