"""The console every command prints to (rich only: `medpanel run` prints with it before it has
imported the runner or the report)."""

from __future__ import annotations

import errno
import os
import sys

from rich.console import Console

from medpanel.experiments.cli import streams


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own exits 1 without a word; the CLI says what happened in its one line (main.py).
        streams.cut_off()
        raise BrokenPipeError(errno.EPIPE, "standard output closed by its reader")


def make_console() -> Console:
    """A terminal's own width (or COLUMNS when set); piped output (CI logs, `| tee`) gets 160
    columns, as rich would otherwise wrap it at 80. A reader that goes away (`| head`) is a
    `BrokenPipeError`, which the CLI turns into one line."""
    return _Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)


console = make_console()
