"""Two fake OpenAI endpoints for the model and prompt-variant axes: each answers every string field
with its own token and every choice with its own end of the enum, so a trace names who answered."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from medpanel.experiments.cli.main import main

from .fake_openai import completion, schema_reply


def _fill(value: Any, schema: dict[str, Any], token: str, last: bool) -> Any:
    if isinstance(value, bool):
        return last  # the "last" endpoint also says yes (a Challenger finds a material weakness)
    if isinstance(value, str):
        return token
    if isinstance(value, list):
        return [_fill(v, schema, token, last) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, schema, token, last) for k, v in value.items()}
    return value


def endpoint(token: str, *, last: bool = False) -> Any:
    """A handler: a valid reply whose strings are `token`; letters from the enum's start (or end), and
    every boolean false (or true)."""

    def handler(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        reply = schema_reply(body)
        fmt = body.get("response_format") or {}
        schema = fmt.get("json_schema", {}).get("schema") or fmt.get("schema") or {}
        props = schema.get("properties", {})
        out = {}
        for key, value in reply.items():
            prop = props.get(key, {})
            enum = prop.get("enum") or prop.get("items", {}).get("enum")
            if enum and isinstance(value, str):
                out[key] = enum[-1] if last else enum[0]
            else:
                out[key] = _fill(value, prop, token, last)
        return 200, {}, completion(json.dumps(out))

    return handler


def validate(path: Path) -> tuple[int, str]:
    """`medpanel validate PATH` in this process: its exit code and what it wrote to stderr."""
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            main(["validate", str(path)])
            rc = 0
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return rc, err.getvalue()
