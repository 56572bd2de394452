"""One JSON line of a dataset file, read so that whatever it holds can be stored as given.

A duplicate key is refused (the last would win silently; YAML's duplicates are refused too), as is
nesting too deep to parse, a number too long to convert, and text no file or database can keep (a
lone surrogate such as an escaped `\\ud800`, a NUL, which PostgreSQL refuses).
"""

from __future__ import annotations

import json

from medpanel.experiments.errors import UserError


def load_line(line: str, where: str) -> object:
    """The JSON value of one line, or a `UserError` naming `where` (file:line) and the key."""
    try:
        return json.loads(line, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"not valid JSON ({exc.msg} at column {exc.colno}). Write one JSON object per line",
            file=where,
        ) from None
    except _DuplicateKey as exc:
        raise UserError(f"the key {exc.key!r} appears twice in one object (the last would win silently). Keep one",
                        file=where, field=exc.key) from None
    except RecursionError:
        raise UserError("nested too deeply to read. Write one flat JSON object per line", file=where) from None
    except ValueError as exc:  # a number too long to convert (Python's 4,300-digit limit)
        detail = "a number of more than 4,300 digits" if "digits" in str(exc) else str(exc)
        raise UserError(f"cannot be read ({detail}). Write ids as short strings and numbers of a sensible length",
                        file=where) from None


def lines_of(text: str) -> list[str]:
    """The lines of a JSON-lines text: split at "\\n" only (a "\\r" before it dropped). `str.splitlines`
    also splits at U+2028, U+2029, U+0085 and the other separators Unicode counts, which JSON keeps
    unescaped inside a string: a question holding one would read back as two broken lines."""
    return [line.removesuffix("\r") for line in text.split("\n")]


MAX_ID_CHARS = 512
"""The longest id (realidx, dataset) a record may have: ids are keys of the study and parts of file names."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are unique: the last of two equal keys would win silently (YAML's are refused too)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def storable(value: str, where: str, field: str) -> None:
    """Text every storage keeps as given: no lone surrogate (not UTF-8), no NUL (PostgreSQL refuses it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(f"holds a lone surrogate ({value[exc.start]!r} at character {exc.start}), which is not text "
                        "any file or database can store. Fix the escape (\\ud800 and the like) in the source",
                        file=where, field=field) from None
    if "\x00" in value:
        raise UserError(f"holds a NUL character (at character {value.index(chr(0))}), which no database stores as "
                        "text. Remove it", file=where, field=field)
