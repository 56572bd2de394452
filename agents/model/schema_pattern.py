"""A string that matches a JSON schema's `pattern`, for replies built from a schema (`schema_reply`).

The package's reply models carry no pattern today; a model that adds one (an ICD code, a
`[A-E](,[A-E])*` list) should still get a valid scripted reply, not a re-ask. A full regex
generator is a heavy dependency for that, so this reads a small, common subset and writes its
shortest match: literals and escapes, `.`, character classes with ranges (negated ones too), the
classes `\\d \\w \\s` and their negations, groups (`(...)`, `(?:...)`, `(?P<name>...)`),
alternation (the first branch), the quantifiers `? * + {m} {m,} {m,n}` (their minimum; lazy ones
alike) and the anchors `^ $`. Anything else (lookarounds, backreferences, `\\b`, inline flags) is
refused with `PatternError` naming it; the result is checked with `re.search` either way, so what
comes back always matches.
"""

from __future__ import annotations

import re
import string

_CLASSES = {"d": string.digits, "w": string.ascii_letters + string.digits + "_", "s": " \t\n"}
_CANDIDATES = string.ascii_lowercase + string.ascii_uppercase + string.digits + " _-.,:;/"
"""Characters tried, in order, for `.` and for a negated class or escape."""


class PatternError(ValueError):
    """A pattern outside the subset this module reads, or one its shortest match does not satisfy."""


class _Reader:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def take(self) -> str:
        c = self.peek()
        self.i += 1
        return c

    def refuse(self, what: str) -> PatternError:
        return PatternError(f"pattern {self.p!r}: {what} (at character {self.i}) is outside the subset a "
                            "scripted reply can match; give the field a simpler pattern or a responder")


def _first_not_in(chars: str) -> str:
    for c in _CANDIDATES:
        if c not in chars:
            return c
    raise PatternError(f"no printable character outside {chars!r}")


def _escape(r: _Reader) -> str:
    """The characters an escape stands for (all of them: a class needs the set, an atom its first)."""
    c = r.take()
    if not c:
        raise r.refuse("a trailing backslash")
    if c.lower() in _CLASSES:
        chars = _CLASSES[c.lower()]
        return chars if c.islower() else _first_not_in(chars)
    if c in "ntrfv":
        return {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}[c]
    if c.isalnum():  # \b, \B, \A, \Z, \1 ...: assertions and backreferences
        raise r.refuse(f"the escape \\{c}")
    return c


def _char_class(r: _Reader) -> str:
    """One character of a `[...]` class (the opening bracket already read)."""
    negated = r.peek() == "^"
    if negated:
        r.take()
    members = ""
    first = True
    while True:
        c = r.take()
        if not c:
            raise r.refuse("an unclosed character class")
        if c == "]" and not first:
            break
        first = False
        chars = _escape(r) if c == "\\" else c
        if len(chars) == 1 and r.peek() == "-" and r.p[r.i + 1 : r.i + 2] not in ("]", ""):
            r.take()
            end = r.take()
            end = _escape(r) if end == "\\" else end
            if len(end) != 1 or ord(end) < ord(chars):
                raise r.refuse(f"the range {chars}-{end}")
            chars = "".join(chr(x) for x in range(ord(chars), ord(end) + 1))
        members += chars
    if negated:
        return _first_not_in(members)
    return members[0]


def _quantifier(r: _Reader) -> int | None:
    """The minimum count of a quantifier after an atom, or None when none follows."""
    c = r.peek()
    if c in ("?", "*"):
        low = 0
    elif c == "+":
        low = 1
    elif c == "{" and re.match(r"\{\d+(,\d*)?\}", r.p[r.i :]):
        m = re.match(r"\{(\d+)(,\d*)?\}", r.p[r.i :])
        assert m is not None
        r.i += m.end() - 1
        low = int(m.group(1))
    else:
        return None
    r.take()
    if r.peek() in ("?", "+"):  # lazy or possessive: the same minimum
        r.take()
    return low


def _group_start(r: _Reader) -> None:
    if r.peek() != "?":
        return
    r.take()
    kind = r.take()
    if kind == ":":
        return
    if kind == "P" and r.peek() == "<":
        while r.take() not in (">", ""):
            pass
        return
    raise r.refuse(f"the group (?{kind}")


def _atom(r: _Reader) -> str:
    c = r.take()
    if c == "(":
        _group_start(r)
        inner = _alternation(r)
        if r.take() != ")":
            raise r.refuse("an unclosed group")
        return inner
    if c == "[":
        return _char_class(r)
    if c == ".":
        return _CANDIDATES[0]
    if c == "\\":
        return _escape(r)[0]
    if c in "^$":
        return ""
    if c in "*+?{":
        raise r.refuse(f"a quantifier {c!r} with nothing before it")
    return c


def _sequence(r: _Reader) -> str:
    out = ""
    while r.peek() not in ("", "|", ")"):
        atom = _atom(r)
        low = _quantifier(r)
        out += atom if low is None else atom * low
    return out


def _alternation(r: _Reader) -> str:
    first = _sequence(r)
    while r.peek() == "|":  # later branches are read (so the pattern is checked) but not used
        r.take()
        _sequence(r)
    return first


def matching(pattern: str) -> str:
    """The shortest string this module's reading of `pattern` gives; it `re.search`-matches it."""
    r = _Reader(pattern)
    out = _alternation(r)
    if r.i < len(pattern):
        raise r.refuse(f"an unmatched {pattern[r.i]!r}")
    try:
        ok = re.search(pattern, out) is not None
    except re.error as exc:
        raise PatternError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
    if not ok:
        raise PatternError(f"pattern {pattern!r}: the built string {out!r} does not match it")
    return out
