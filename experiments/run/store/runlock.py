"""One runner per run directory on one machine: an exclusive `flock` on `RUN_DIR/runner.lock`.

The kernel releases a flock when its process dies, however it dies, so a lock left by a killed
runner never blocks the next one, and a pid reused by an unrelated process means nothing. Taking
the lock is atomic (no check-then-write window for two runners starting at once). The file notes
the holder's pid for the error message; it is removed when the holder finishes. It is opened by the
run directory's writer (`confined`): a link, a FIFO or a file with another name is refused, never
truncated.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.confined import Confined

LOCK_NAME = "runner.lock"


def _noted_pid(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace")
        pid = text.split(":", 1)[0].strip()
        if pid.isdigit():
            return pid
    return "?"


def _busy(run_dir: Path, pid: str) -> UserError:
    path = run_dir / LOCK_NAME
    return UserError(f"{run_dir} is being run by process {pid}, which holds {path}. Wait for it to finish, "
                     f"or stop it (Ctrl-C in its terminal, or kill {pid}) and resume. The lock is released "
                     "when its process exits, so a runner.lock left by a killed run never blocks; if no "
                     f"process {pid} exists, `fuser -v {path}` names the one holding the file open",
                     field="RUN_DIR")


def refuse_if_running(run_dir: Path) -> None:
    """Refuse, as `run_lock` would, a directory another process is running now: checked before the
    study is opened, since a stopped runner may hold SQLite's write lock and opening would wait on it."""
    pid = lock_holder(run_dir)
    if pid is not None:
        raise _busy(run_dir, pid)


@contextlib.contextmanager
def run_lock(run_dir: Path, owner: str) -> Iterator[None]:
    folder = Confined(run_dir)
    while True:
        fd = folder.open_own(LOCK_NAME)  # a regular file of one name: a link or a FIFO is refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _noted_pid(fd)
            os.close(fd)
            raise _busy(run_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        # The previous holder removes the file when it finishes: if that happened between our open
        # and our lock, we hold a lock on a file nobody else will see. Open the path again.
        info = os.fstat(fd)
        if folder.identity(LOCK_NAME) == (info.st_dev, info.st_ino):
            break
        os.close(fd)
    try:
        with contextlib.suppress(OSError):  # a full disk: the lock holds without its note
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}:{owner}\n".encode(), 0)
        yield
    finally:
        # Removed while still held, so a runner waiting on this file re-opens the path (see above).
        with contextlib.suppress(OSError):
            folder.unlink(LOCK_NAME)
        os.close(fd)


def lock_holder(run_dir: Path) -> str | None:
    """The pid noted by the process running `run_dir` now, or None when no process holds its lock."""
    path = run_dir / LOCK_NAME
    try:
        # Never through a link, never waiting on a FIFO: what is there is refused by the writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _noted_pid(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
