"""User mistakes: one clear line naming the file, the field and the fix, exit code 2.

Also the readers of the files a user hands medpanel (scenarios, datasets, run directories): every
way such a file can be unreadable (missing, a folder, not UTF-8, not JSON, damaged) becomes a
`UserError` that names the file, so no command has to remember each case itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MAX_STREAM_BYTES = 100_000_000
"""What is read from a file that is not a regular file (a pipe, a device) when no smaller limit applies."""


class UserError(Exception):
    """A problem the user can fix (bad YAML, missing file, unknown flag).

    The CLI prints `str(err)` on one line and exits with code 2, no traceback. Build the message
    as `<file>: <field>: <what is wrong>. <fix>` so it can be acted on without reading code.
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        parts = [p for p in (file, field) if p]
        super().__init__(": ".join([*parts, message]))


def read_text(path: Path | str, *, what: str = "file", fix: str = "Check the path", field: str | None = None,
              max_bytes: int | None = None) -> str:
    """A UTF-8 text file, or a `UserError` naming it: missing, a folder, too large, unreadable, not UTF-8.

    A UTF-8 byte-order mark is dropped (editors on Windows write one). `max_bytes` refuses a file
    larger than that before reading it.
    """
    p = Path(path)
    try:
        if p.is_dir():
            raise UserError(f"is a folder, not a {what}. {fix}", file=str(p), field=field)
        if max_bytes is not None and p.is_file() and p.stat().st_size > max_bytes:
            raise UserError(f"is {p.stat().st_size:,} bytes; a {what} may have at most {max_bytes:,}. "
                            "Use a smaller file", file=str(p), field=field)
        # A pipe or a device (/dev/stdin, /dev/zero) has no size to check first: read a bounded amount.
        limit = max_bytes if max_bytes is not None else None if p.is_file() else MAX_STREAM_BYTES
        with p.open("rb") as fh:
            data = fh.read() if limit is None else fh.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise UserError(f"gives more than {limit:,} bytes; a {what} may have at most that. Use a smaller file",
                            file=str(p), field=field)
    except FileNotFoundError:
        raise UserError(f"no such {what}. {fix}", file=str(p), field=field) from None
    except OSError as exc:
        raise UserError(f"cannot read this {what} ({exc.strerror or exc}). {fix}", file=str(p), field=field) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        binary = b"\x00" in data[:4096]
        kind = "a binary file, not text" if binary else f"not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})"
        raise UserError(f"{kind}. Give a {what} saved as UTF-8", file=str(p), field=field) from None


def read_json(path: Path | str, *, what: str = "JSON file", fix: str = "Check the path",
              field: str | None = None) -> Any:
    """A JSON document, or a `UserError` naming the file and where its JSON breaks."""
    p = Path(path)
    text = read_text(p, what=what, fix=fix, field=field)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}): the {what} is "
                        f"damaged. {fix}", file=str(p), field=field) from None
    except RecursionError:
        raise UserError(f"nested too deeply to read: the {what} is damaged. {fix}", file=str(p), field=field) from None


def error_line(message: str) -> None:
    """Print one `error:` line on stderr. Newlines inside a message are folded, so every error is
    exactly one line whatever produced it (a pydantic message, an OS error)."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    sys.stderr.write(f"error: {line.removeprefix('error: ')}\n")
    sys.stderr.flush()
