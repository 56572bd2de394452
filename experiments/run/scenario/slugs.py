"""Condition slugs: `{c: 1, r: 0}` <-> `c1r0`, and a named variant (`c1r1k1-ind`, `between-gap`) as flags.

A slug names a condition in every table, transcript path and store row, so both directions live in
one place and mean the same thing in every scenario.
"""

from __future__ import annotations

import re
from typing import Any

from medpanel.agents.types import Condition


def slug_for(flags: dict[str, int | str], variant: str | None = None) -> str:
    """`{c: 1, r: 0}` -> `c1r0`; string-valued flags and a variant append as `-value`."""
    head = "".join(f"{k}{v}" for k, v in flags.items() if isinstance(v, int))
    tail = [str(v) for v in flags.values() if not isinstance(v, int)]
    if variant:
        tail.append(variant)
    return "-".join([head, *tail]) if head else "-".join(tail)


def condition_from_slug(slug: str, pipeline: str, settings: dict[str, Any]) -> Condition:
    """Parse `c1r1k1-ind` back into flags plus a `variant` flag."""
    m = re.fullmatch(r"((?:[a-z]\d)+)(?:-([a-z0-9_-]+))?", slug)
    if not m:
        if re.fullmatch(r"[a-z][a-z0-9_-]*", slug):
            # A named condition the pipeline defines itself (e.g. `between-gap`, `upfront`).
            return Condition(slug=slug, pipeline=pipeline, flags={"variant": slug}, settings=settings)
        raise ValueError(f"variant {slug!r} is not a slug like c1r1k1-ind or a name like between-gap")
    flags: dict[str, int | str] = {p[0]: int(p[1]) for p in re.findall(r"[a-z]\d", m.group(1))}
    if m.group(2):
        flags["variant"] = m.group(2)
    return Condition(slug=slug, pipeline=pipeline, flags=flags, settings=settings)
