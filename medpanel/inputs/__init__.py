"""Reading a file a user names: the one place every command opens one (`files.py`), and printing
what such a file holds without its terminal controls (`printable.py`).

It imports nothing of medpanel's, so every room (retrieval included) can read through it.
"""

from __future__ import annotations

from medpanel.inputs.files import (
    DEFAULT_MAX_BYTES,
    InputFileError,
    check_input,
    open_input,
    read_input,
    read_input_text,
    special_kind,
)
from medpanel.inputs.printable import one_line, printable

__all__ = ["DEFAULT_MAX_BYTES", "InputFileError", "check_input", "one_line", "open_input", "printable", "read_input",
           "read_input_text", "special_kind"]
