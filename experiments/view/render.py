"""HTML of a generic value (a reply's parsed fields, an event's data, a summary): what the `value`
macro of `_macros.html.j2` wrote, built in Python.

A question page shows every field of every event, so a full run calls this hundreds of thousands
of times, recursively; as a jinja macro each call cost a frame, a context and escaping through the
runtime. The output is the same markup, and every string still goes through `markupsafe.escape`:
nothing from a model, a corpus or a dataset is marked safe unescaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape

MAX_DEPTH = 6
"""Below this depth a value is shown as its escaped text (a model can send deeply nested JSON)."""
LONG_TEXT = 160
"""Strings longer than this (or with a newline) get a text block of their own."""


def pretty(v: Any) -> str:
    """A scalar as the page prints it: booleans as yes/no, None as a dash."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    return str(v)


def render_value(v: Any, depth: int = 0) -> Markup:
    """Mappings as definition lists, lists of structures as ordered lists, flat lists inline,
    long text in a block, scalars as `pretty` prints them; every leaf escaped."""
    return Markup("".join(_parts(v, depth, [])))


def _parts(v: Any, depth: int, out: list[str]) -> list[str]:
    if depth > MAX_DEPTH:
        out += ('<span class="dim">', escape(v), "</span>")
    elif isinstance(v, Mapping):
        if not v:
            out.append('<span class="dim">(empty)</span>')
            return out
        out.append('<dl class="kv">')
        for k, x in v.items():
            out += ("<dt>", escape(k), "</dt><dd>")
            _parts(x, depth + 1, out)
            out.append("</dd>")
        out.append("</dl>")
    elif isinstance(v, list | tuple):
        if not v:
            out.append('<span class="dim">(none)</span>')
        elif any(isinstance(x, Mapping | list | tuple) for x in v):
            out.append('<ol class="list">')
            for x in v:
                out.append("<li>")
                _parts(x, depth + 1, out)
                out.append("</li>")
            out.append("</ol>")
        else:
            out.append(", ".join(f'<span class="item">{escape(pretty(x))}</span>' for x in v))
    elif isinstance(v, str) and ("\n" in v or len(v) > LONG_TEXT):
        out += ('<div class="text">', escape(v), "</div>")
    else:
        out.append(escape(pretty(v)))
    return out
