"""Files a run writes: names that are safe and unique for any id, paths read from a study, status.json.

A transcript's or a page's file name is a readable prefix plus a hash of the exact key. Every file
is written by `confined.Confined` (a temporary name, fsynced, then renamed; no link followed).
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
from pathlib import Path, PurePosixPath

from medpanel.experiments.run.store.confined import Confined

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

STATUS_NAME = "status.json"

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


def file_per_pair(pair: tuple[str, str, str, int], tag: str | None = None) -> PurePosixPath:
    """`transcripts/<condition>/<dataset>__<qid>[__r<n>]-<hash>[.<tag>].json`: where runs before the
    transcript logs kept a pair's file, and where a shared-storage row with no usable path is
    written out (`sync_transcripts`).

    Readers never recompute this: every row stores its transcript's path or record, so runs written
    with an older naming open unchanged.
    """
    condition, dataset, qid, repeat = pair
    readable = f"{dataset}__{qid}" + (f"__r{repeat}" if repeat else "")
    name = safe_stem(readable, condition, dataset, qid, repeat) + (f".{tag}" if tag else "")
    return PurePosixPath("transcripts", safe_dir(condition), f"{name}.json")


def safe_dir(name: str) -> str:
    """A directory name: `name` itself when it is already safe and short (condition slugs are), else hashed."""
    if _UNSAFE.search(name) or len(name) > NAME_PREFIX_CHARS or name.strip(".") == "":
        return safe_stem(name, name)
    return name


def inside(root: Path, relative: str) -> Path | None:
    """`root / relative` if it stays inside `root` (a path read from a database is not trusted)."""
    path = (root / relative).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def own_path(relative: str) -> PurePosixPath | None:
    """A path a study names as the run's own (a row's transcript), when it is relative and has no
    `..`: what the run directory's writer may write or remove. None for anything else."""
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or any(p in ("", ".", "..") for p in path.parts):
        return None
    return path


def row_file(run_dir: Path, relative: str) -> Path:
    """A result row's transcript file, refused (ValueError) when the row's path leaves the run
    directory: an absolute or `../` path in a study is not followed, whoever reads it."""
    path = inside(run_dir, relative)
    if path is None:
        raise ValueError(f"the transcript path {relative!r} of a result row in {run_dir / 'study.db'} leaves the run "
                         "directory; it is not read. The study was edited or damaged: restore it from a backup")
    return path


STATUS_BYTES = 2048
"""status.json is written this large (padded with spaces, still valid JSON) so that a disk that has
filled up since can still take the final status: it is then overwritten in place."""


def write_status(run_dir: Path, status: dict[str, object]) -> None:
    """RUN_DIR/status.json, through the run directory's writer (`confined`): never through a link."""
    text = json.dumps(status, indent=2) + "\n"
    padded = text + " " * max(0, STATUS_BYTES - len(text.encode()))
    folder = Confined(run_dir)
    try:
        folder.write(STATUS_NAME, padded)
    except OSError as exc:
        # No room for a new file: overwrite the old one in place, within blocks it already has.
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not folder.overwrite_in_place(STATUS_NAME, text.encode()):
            raise
