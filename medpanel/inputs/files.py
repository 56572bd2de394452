"""Opening a path a user names, for reading: checked before a byte is read.

A path handed to medpanel (a scenario, a dataset, a corpus's input files, a folder of scenarios)
may be anything: a named pipe (an open or a read blocks for ever), a link to /dev/zero (a read
never ends), a socket, a folder, a file of gigabytes, text in another encoding. `open_input` opens
without blocking (`O_NONBLOCK`: a FIFO with no writer would hold the open itself), then checks what
the descriptor is (`fstat` of what was opened, so nothing can be swapped between a check and the
open), and hands back a file only when it is a regular one. `read_input` adds a size bound, read as
a bound (a file that grows after the check still stops one byte past it), and `read_input_text`
UTF-8. Every problem is one `InputFileError` line naming the path, what is wrong and the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

DEFAULT_MAX_BYTES = 512 * 2**20
"""The most a whole-file read takes into memory unless its caller names a smaller bound (a scenario
1 MB, a prompt file 200 KB). Files streamed line by line (a corpus's input) have no size bound."""

REGULAR_FIX = "Give the path of a regular file"


class InputFileError(ValueError):
    """A user-named path that cannot be read as asked: `<path>: <problem>. <fix>` on one line."""

    def __init__(self, path: Path | str, problem: str, fix: str) -> None:
        self.path = str(path)
        self.problem = problem
        self.reason = f"{problem}. {fix}"
        super().__init__(f"{self.path}: {self.reason}")


def kind_of(mode: int) -> str:
    """What a file of this `st_mode` is, in words."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def special_kind(path: Path | str) -> str | None:
    """What `path` is when it exists but is neither a regular file nor a folder (a FIFO, a device,
    a socket), else None. Only `stat`: nothing is opened."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else kind_of(mode)


def open_input(path: Path | str, *, what: str = "file", fix: str = "Check the path") -> BinaryIO:
    """`path` opened for reading in binary, once it is known to be a regular file."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputFileError(p, f"no such {what}", fix) from None
    except IsADirectoryError:
        raise InputFileError(p, f"is a folder, not a {what}", fix) from None
    except ValueError:  # a NUL in the path
        raise InputFileError(p, f"is not a path (it holds a NUL character), not a {what}", fix) from None
    except OSError as exc:
        kind = special_kind(p)  # a socket cannot be opened at all (ENXIO): say what it is
        if kind is not None:
            raise InputFileError(p, f"is {kind}, not a {what} saved as a file", REGULAR_FIX) from None
        raise InputFileError(p, f"cannot open this {what} ({exc.strerror or exc})", fix) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputFileError(p, f"is a folder, not a {what}", fix)
        if not stat.S_ISREG(mode):
            raise InputFileError(p, f"is {kind_of(mode)}, not a {what} saved as a file", REGULAR_FIX)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_input(path: Path | str, *, what: str = "file", fix: str = "Check the path") -> None:
    """Refuse `path` unless it is a regular file, for a library that opens it by name itself (the
    datasets library's parquet and JSON readers): opened and checked as `open_input` does, then closed."""
    open_input(path, what=what, fix=fix).close()


def read_input(path: Path | str, *, what: str = "file", fix: str = "Check the path",
               max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`."""
    with open_input(path, what=what, fix=fix) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise InputFileError(path, f"is {size:,} bytes; a {what} may have at most {max_bytes:,}",
                                 "Use a smaller file")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise InputFileError(path, f"cannot read this {what} ({exc.strerror or exc})", fix) from None
    if len(data) > max_bytes:  # it grew after the check
        raise InputFileError(path, f"is more than {max_bytes:,} bytes; a {what} may have at most that",
                             "Use a smaller file")
    return data


def decode_utf8(data: bytes, path: Path | str, *, what: str) -> str:
    """`data` as UTF-8 text (a byte-order mark dropped), or an error naming the line of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        binary = b"\x00" in data[:4096]
        kind = "a binary file, not text" if binary else f"not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})"
        raise InputFileError(path, kind, f"Give a {what} saved as UTF-8") from None


def read_input_text(path: Path | str, *, what: str = "file", fix: str = "Check the path",
                    max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """A regular file of at most `max_bytes`, as UTF-8 text (editors on Windows write a byte-order
    mark: it is dropped)."""
    return decode_utf8(read_input(path, what=what, fix=fix, max_bytes=max_bytes), path, what=what)
