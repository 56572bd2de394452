"""The standard streams a command prints to, made safe before it runs.

- **A closed descriptor** (`medpanel ... >&-`, a service started without one): Python leaves
  `sys.stdout` None, and the next file opened would get descriptor 1, so anything printed would be
  written into that file (a study, a transcript). Each closed one of 0, 1 and 2 is opened on
  /dev/null first; a closed stdout is then refused in one line (nothing could be shown).
- **An encoding without UTF-8** (the C locale with UTF-8 mode off, `PYTHONIOENCODING=ascii`): a
  question's or a model's text would end the command in a UnicodeEncodeError. What the encoding
  cannot hold is printed as escapes (`\\u2713`) instead.
- **A reader that goes away** (`| head -0`): `cut_off` makes the rest of the output go to /dev/null,
  so the interpreter's own last flush fails no more.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import sys


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _devnull_on(fd: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def prepare() -> bool:
    """Make descriptors 0-2 and `sys.stdout`/`sys.stderr` safe to use; True when stdout was closed."""
    closed = [fd for fd in (0, 1, 2) if _closed(fd)]
    for fd in closed:  # in order: the lowest free descriptor is the one to fill
        _devnull_on(fd)
    if sys.stdout is None or 1 in closed:
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    if sys.stderr is None or 2 in closed:
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        with contextlib.suppress(LookupError, AttributeError, ValueError):
            if codecs.lookup(encoding).name != "utf-8":
                stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    return 1 in closed


_cut = False


def cut_off() -> None:
    """Stdout's reader has gone: what is still buffered and anything printed later go to /dev/null."""
    global _cut
    _cut = True
    with contextlib.suppress(OSError):
        _devnull_on(1)


def reader_gone() -> bool:
    """Whether stdout's reader has gone (`cut_off` ran, or fd 1 is a pipe with its read end closed).
    typer turns an EPIPE into a silent exit 1; this tells that exit from a command's own."""
    if _cut:
        return True
    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, AttributeError, ValueError):  # no poll() on this platform
        return False
