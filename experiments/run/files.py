"""Files a run writes: names that are safe and unique for any id, atomic writes, status.json.

A transcript's or a page's file name is a readable prefix plus a hash of the exact key; every file
is written to a temporary name, fsynced, then renamed, so a crash leaves the old file or the new
one, never half of either.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

NAME_PREFIX_CHARS = 80
"""How much of an id a file name keeps readable; the hash after it carries the identity."""


def safe_stem(readable: str, *key: object) -> str:
    """A file name stem for `key`: a readable, sanitised prefix plus a hash of the exact key.

    Sanitising alone is not injective (`a/b`, `a_b` and `a b` all become `a_b`) and not bounded
    (a 300-character id exceeds the file system's 255 bytes), so the name's identity is the hash
    of the key itself (64 bits of SHA-256; the prefix is only for people reading `ls`).
    """
    digest = hashlib.sha256(json.dumps([str(k) for k in key], ensure_ascii=False).encode()).hexdigest()[:16]
    prefix = _UNSAFE.sub("_", readable)[:NAME_PREFIX_CHARS].lstrip(".")
    return f"{prefix}-{digest}" if prefix else digest


def safe_dir(name: str) -> str:
    """A directory name: `name` itself when it is already safe and short (condition slugs are), else hashed."""
    if _UNSAFE.search(name) or len(name) > NAME_PREFIX_CHARS or name.strip(".") == "":
        return safe_stem(name, name)
    return name


def inside(root: Path, relative: str) -> Path | None:
    """`root / relative` if it stays inside `root` (a path read from a database is not trusted)."""
    path = (root / relative).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def row_file(run_dir: Path, relative: str) -> Path:
    """A result row's transcript file, refused (ValueError) when the row's path leaves the run
    directory: an absolute or `../` path in a study is not followed, whoever reads it."""
    path = inside(run_dir, relative)
    if path is None:
        raise ValueError(f"the transcript path {relative!r} of a result row in {run_dir / 'study.db'} leaves the run "
                         "directory; it is not read. The study was edited or damaged: restore it from a backup")
    return path


def write_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """`text` at `path` whole or not at all: written to a temporary sibling, then renamed over it,
    so no reader and no crash of this process ever meets a half-written file at `path`.

    `durable=False` skips the fsync: the rename still holds against a crash of the process, not
    against a power loss or a kernel crash, where the file's last seconds may be lost. Transcripts
    are written so (their rows' commits run with SQLite's `synchronous=NORMAL`, no fsync either);
    the fsync cost 3 ms of wall time and 0.5 ms of CPU a question."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if exc.errno:
            raise _naming(exc, path) from exc
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno:
            raise _naming(exc, path) from exc
        raise


def _naming(exc: OSError, path: Path) -> OSError:
    """The same error, naming the file meant (not its temporary sibling)."""
    return OSError(exc.errno, exc.strerror, str(path))


STATUS_BYTES = 2048
"""status.json is written this large (padded with spaces, still valid JSON) so that a disk that has
filled up since can still take the final status: it is then overwritten in place."""


def write_status(path: Path, status: dict[str, Any]) -> None:
    text = json.dumps(status, indent=2) + "\n"
    padded = text + " " * max(0, STATUS_BYTES - len(text.encode()))
    try:
        write_atomic(path, padded)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not path.is_file():
            raise
        size = path.stat().st_size
        data = text.encode()
        if len(data) > size:
            raise
        # No room for a new file: overwrite the old one in place, within blocks it already has.
        with open(path, "r+b") as fh:
            fh.write(data + b" " * (size - len(data)))
            fh.flush()
            os.fsync(fh.fileno())
