"""Text read from a file, made safe to print at a terminal.

A scenario's description, a question, a model's reply, a corpus's title, a file name: any of them may
hold terminal control sequences (an OSC title or hyperlink, a CSI that moves the cursor or clears the
screen, a bidirectional override that shows text in another order than it is). Printed raw they
would rewrite the terminal; every command prints such text through `printable`, which shows each
control character as an escape (`\\x1b`, `\\u202e`) and leaves all other text as it is.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and newline, DEL, C1 controls (a lone U+009B is a CSI on some terminals), the
line and paragraph separators, and the bidirectional marks, embeddings, overrides and isolates."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> object:
    """Every string of a JSON-like value with its control characters shown escaped."""
    if isinstance(value, str):
        return _CONTROL.sub(_escape, value)
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def one_line(value: str) -> str:
    """`value` printable and on one line (tabs and newlines folded into spaces)."""
    return " ".join(str(printable(value)).split())
