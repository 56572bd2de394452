"""Reading a YAML settings file safely: line numbers for every key, and limits a hostile file cannot pass.

A scenario is a page of settings, so the limits are orders of magnitude above any real one: they
keep a mistaken or hostile file (a pasted data set, a YAML alias bomb) from costing minutes of CPU
and a copy in every run directory. Duplicate keys are refused (the second would silently replace
the first). `${VAR}` and `${VAR:-default}` are expanded before parsing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from medpanel.experiments.errors import UserError, read_text

MAX_SCENARIO_BYTES = 1_000_000
"""A scenario file (after `${VAR}` expansion) larger than this is refused before parsing."""
MAX_YAML_VALUES = 10_000
"""Values (mappings, lists, scalars) in the parsed document, counting each alias expansion."""
MAX_YAML_DEPTH = 32
"""Nesting depth of mappings and lists."""
MAX_STRING_CHARS = 100_000
"""Characters in one string value."""

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(text: str, file: str) -> str:
    """Replace `${VAR}` / `${VAR:-default}` before parsing, naming the line of a missing variable."""

    def sub(m: re.Match[str]) -> str:
        value = os.environ.get(m.group(1), m.group(2))
        if value is None:
            line = text.count("\n", 0, m.start()) + 1
            raise UserError(
                f"line {line}: environment variable {m.group(1)} is not set. "
                f"Export it, or write ${{{m.group(1)}:-default}}",
                file=file,
            )
        return value

    return _ENV.sub(sub, text)


class Refused(Exception):
    """A YAML document medpanel will not load (a duplicate key, a size limit), with its line."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader that remembers the line of every mapping key, refuses duplicate keys, and stops
    composing at the value and depth limits (composing 200,000 values alone takes seconds)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._values = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        self._values += 1
        try:
            if self._depth > MAX_YAML_DEPTH or self._values > MAX_YAML_VALUES:
                # types-PyYAML declares Parser.peek_event without types; it returns the next Event.
                peek: Callable[[], yaml.Event] = self.peek_event
                mark = peek().start_mark
                line = mark.line + 1 if mark is not None else None
                if self._depth > MAX_YAML_DEPTH:
                    raise Refused(f"values nest deeper than {MAX_YAML_DEPTH} levels. Flatten them", line)
                raise Refused(f"the document holds more than {MAX_YAML_VALUES:,} values. A scenario is settings, "
                               "not data: put long lists in a dataset file", line)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[object, object]:
    # A repeated key would silently replace the first (a dropped `max_calls` budget, say). Keys
    # merged in with `<<: *anchor` may be overridden: that is what a merge is for.
    first: dict[object, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        if key in first:
            raise Refused(f"key {key!r} appears twice (first on line {first[key]}); the second would silently "
                           "replace the first. Keep one", line)
        first[key] = line
    mapping = loader.construct_mapping(node, deep=True)
    lines = {loader.construct_object(k): k.start_mark.line + 1 for k, _ in node.value}
    mapping["__lines__"] = lines  # stripped before validation, kept for error messages
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _check_size(root: yaml.Node) -> None:
    """Refuse a document that expands past the limits, before anything is built from it.

    The composed node graph shares an aliased node wherever `*name` repeats it, so it stays small
    while what it expands to (every later step walks the expansion) can be exponential: the YAML
    "billion laughs". Expanded sizes are summed per distinct node, in time linear in the file.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()
    aliased = False

    def size(node: yaml.Node, depth: int, path: str) -> int:
        nonlocal aliased
        key = id(node)
        if key in sizes:
            aliased = True
            return sizes[key]
        line = node.start_mark.line + 1
        where = f" at {path}" if path else ""
        if key in active:
            raise Refused(f"an alias refers to itself{where}. Write the value out", line)
        if depth > MAX_YAML_DEPTH:
            raise Refused(f"values nest deeper than {MAX_YAML_DEPTH} levels{where}. Flatten them", line)
        if isinstance(node, yaml.ScalarNode):
            if len(node.value) > MAX_STRING_CHARS:
                raise Refused(f"a string of {len(node.value):,} characters{where}; at most {MAX_STRING_CHARS:,} "
                               "are allowed. Shorten it", line)
            n = 1
        else:
            active.add(key)
            n = 1
            if isinstance(node, yaml.MappingNode):
                children = [(v, f"{path}.{k.value}" if path else str(k.value)) for k, v in node.value]
            else:
                children = [(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
            for child, child_path in children:
                n += size(child, depth + 1, child_path)
                if n > MAX_YAML_VALUES:
                    hint = ("; aliases (*name) repeat their anchor's whole content. Write the values out"
                            if aliased else ". Make it smaller")
                    raise Refused(f"the document expands to more than {MAX_YAML_VALUES:,} values{where}{hint}",
                                   line)
            active.discard(key)
        sizes[key] = n
        return n

    size(root, 0, "")


def parse_yaml(text: str) -> Any:
    """Parse one YAML document with line numbers, refusing duplicate keys and oversized expansions.

    Raises `yaml.YAMLError` or `Refused`; the callers turn both into a `UserError` naming the file.
    """
    loader = _LineLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise Refused(f"values nest deeper than {MAX_YAML_DEPTH} levels. Flatten them") from None
        if node is None:
            return None
        _check_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError | Refused) -> tuple[int | None, str]:
    if isinstance(exc, Refused):
        return exc.line, str(exc)
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return (mark.line + 1 if mark else None), f"malformed YAML ({problem}). Fix the syntax there"


def strip_lines(obj: Any, lines: dict[tuple[object, ...], int], path: tuple[object, ...] = ()) -> Any:
    if isinstance(obj, dict):
        for key, line in obj.pop("__lines__", {}).items():
            lines[(*path, key)] = line
        return {k: strip_lines(v, lines, (*path, k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [strip_lines(v, lines, (*path, i)) for i, v in enumerate(obj)]
    return obj


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def apply_overrides(data: dict[str, object], overrides: list[str], file: str) -> None:
    """`--set settings.rounds=1 model.max_tokens=128`: dotted keys, values parsed as YAML."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {_short(item)} is not KEY=VALUE. Example: --set settings.rounds=1", file=file,
                            field="--set")
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"--set {key}: {part} is not a mapping", file=file, field="--set")
            node = child
        try:
            parsed = parse_yaml(value)
        except (yaml.YAMLError, Refused) as exc:
            _, problem = yaml_problem(exc)
            raise UserError(f"--set {_short(item)}: {problem}", file=file, field="--set") from None
        # A key given in several --set options takes the last value, like a repeated CLI option.
        node[parts[-1]] = strip_lines(parsed, {})


def read_scenario(path: Path, overrides: list[str] | None = None
                  ) -> tuple[dict[str, object], dict[tuple[object, ...], int]]:
    """A scenario file as data, `--set` overrides applied, and the YAML line of every key: not yet
    validated (`scenario.load_scenario` does that). Every problem is one `UserError` line."""
    file = str(path)
    text = read_text(path, what="scenario", fix="Check the path (scenarios live in scenarios/)",
                     max_bytes=MAX_SCENARIO_BYTES)
    text = interpolate(text, file)
    if len(text.encode("utf-8")) > MAX_SCENARIO_BYTES:
        raise UserError(f"is larger than {MAX_SCENARIO_BYTES:,} bytes once ${{VAR}}s are expanded. Use shorter "
                        "values", file=file)
    try:
        raw = parse_yaml(text)
    except (yaml.YAMLError, Refused) as exc:
        line, problem = yaml_problem(exc)
        raise UserError(f"{f'line {line}: ' if line else ''}{problem}", file=file) from None
    if not isinstance(raw, dict):
        raise UserError("the top level must be a mapping with at least `name:`", file=file)
    lines: dict[tuple[object, ...], int] = {}
    data = strip_lines(raw, lines)
    apply_overrides(data, overrides or [], file)
    return data, lines
