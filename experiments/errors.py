"""User mistakes: one clear line naming the file, the field and the fix, exit code 2."""

from __future__ import annotations


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
