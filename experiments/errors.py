"""User mistakes: one clear line naming the file, the field and the fix, exit code 2.

Also the readers of the files a user hands medpanel (scenarios, datasets, run directories): every
way such a file can be unreadable (missing, a folder, not UTF-8, not JSON, damaged) becomes a
`UserError` that names the file, so no command has to remember each case itself.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any


def special_kind(path: Path | str) -> str | None:
    """What `path` is when it exists but is neither a regular file nor a folder (a FIFO, a device,
    a socket), else None. Such a file may block a reader forever or never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def not_regular(path: Path | str, *, what: str, field: str | None = None) -> UserError:
    return UserError(f"is {special_kind(path) or 'not a regular file'}, not a {what} saved as a file. "
                     f"Give the path of a regular file", file=str(path), field=field)


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
        # Only regular files: a FIFO would block the open (or the read) forever, /dev/zero never ends.
        # O_NONBLOCK keeps the open itself from blocking; fstat then checks what was opened.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise not_regular(p, what=what, field=field)
            if max_bytes is not None and info.st_size > max_bytes:
                raise UserError(f"is {info.st_size:,} bytes; a {what} may have at most {max_bytes:,}. "
                                "Use a smaller file", file=str(p), field=field)
            os.set_blocking(fh.fileno(), True)
            data = fh.read()
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
