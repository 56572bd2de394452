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

from medpanel.inputs import DEFAULT_MAX_BYTES, InputFileError, printable, read_input_text, special_kind

__all__ = ["UserError", "error_line", "not_regular", "read_json", "read_text", "special_kind"]


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
    """A UTF-8 text file, or a `UserError` naming it: missing, a folder, a FIFO or a device, too
    large, unreadable, not UTF-8. Read through `medpanel.inputs` (the one reader of a user's files);
    `max_bytes` (default `DEFAULT_MAX_BYTES`) refuses a larger file before reading it."""
    try:
        bound = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
        return read_input_text(path, what=what, fix=fix, max_bytes=bound)
    except InputFileError as exc:
        raise UserError(exc.reason, file=exc.path, field=field) from None


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
    # Control characters shown escaped: a message may quote a file (a path, a YAML line, a value).
    line = " ".join(part.strip() for part in str(printable(str(message))).splitlines() if part.strip())
    sys.stderr.write(f"error: {line.removeprefix('error: ')}\n")
    sys.stderr.flush()
