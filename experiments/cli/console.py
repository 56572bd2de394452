"""The console every command prints to (rich only: `medpanel run` prints with it before it has
imported the runner or the report)."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def make_console() -> Console:
    """A terminal's own width (or COLUMNS when set); piped output (CI logs, `| tee`) gets 160
    columns, as rich would otherwise wrap it at 80."""
    return Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)


console = make_console()
