"""A file or folder a user names for a command's output (`--out`), checked before anything is written.

- It is not one of a run's own records: not by its path (`ownership.refuse_run_records`), and not
  by identity either. A hard link elsewhere to run.json is the same file (device and inode) under
  another name; writing it would destroy the run's record, so it is compared by identity.
- Its folder exists: a mistyped path is refused instead of becoming a tree of new folders.
- It is written by `confined` (a temporary name, then a rename): an existing file is replaced,
  never written through, so any other name it had keeps what it held.
"""

from __future__ import annotations

import os
from pathlib import Path

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.ownership import IN_PLACE, TREES, refuse_run_records

OUTPUT = "an output folder"


def _same_file_in(run_dir: Path, info: os.stat_result) -> Path | None:
    """The file of the run directory that is the file `info` describes, if any (links not followed)."""
    identity = (info.st_dev, info.st_ino)
    names = [run_dir / n for n in ("run.json", "questions.jsonl", "status.json", *IN_PLACE)]
    for tree in TREES:
        for folder, _dirs, files in os.walk(run_dir / tree):  # os.walk follows no link to a folder
            names += [Path(folder) / f for f in files]
    for name in names:
        try:
            found = os.stat(name, follow_symlinks=False)
        except OSError:
            continue
        if (found.st_dev, found.st_ino) == identity:
            return name
    return None


def check_output_file(path: Path, *, field: str, run_dir: Path | None = None) -> Path:
    """`path` as a file to write a command's output to; the path to write (a link the user made to
    an output file is the file it names). Refused: a folder, a missing folder, a run's record."""
    refuse_run_records(path, field=field)
    if path.is_dir():
        raise UserError(f"{path} is a folder. Give a file name, e.g. --out {path / 'results.jsonl'}", field=field)
    target = path.resolve() if path.is_symlink() else path
    parent = target.parent
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist"
        raise UserError(f"the folder of {path} ({parent}) {what}. Create the folder first, or choose another {field}",
                        field=field)
    if run_dir is not None:
        try:
            info = os.stat(target)
        except OSError:
            info = None
        if info is not None and info.st_nlink > 1:
            same = _same_file_in(Path(run_dir), info)
            if same is not None:
                raise UserError(f"{path} is another name (a hard link) of {same}, one of the run's own records; "
                                f"writing it would destroy that record. Choose another file for {field}", field=field)
    return target


def write_output(path: Path, data: str | bytes) -> Path:
    """`data` at `path` (checked by `check_output_file`) whole, replacing the name, never writing through it."""
    return Confined(path.parent, OUTPUT, private=False).write(path.name, data)


def check_output_folder(path: Path, *, field: str) -> Path:
    """`path` as a folder to write a command's files into, made if missing (its parent must exist)."""
    refuse_run_records(path, field=field)
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} is a file. Give a folder for {field}", field=field)
    if not path.parent.is_dir():
        what = "is a file, not a folder" if path.parent.exists() else "does not exist"
        raise UserError(f"the folder {path.parent} that would hold {path} {what}. Create it first, or choose another "
                        f"{field}", field=field)
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {path} ({exc.strerror or exc}). Choose another {field}", field=field) from None
    return path
