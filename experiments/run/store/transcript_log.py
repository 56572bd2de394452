"""Transcripts appended to one file per worker: one open per worker, not one new file per question.

Creating a file costs about a millisecond of CPU on ext4 (the inode, the directory entry, the
journal), more than the rest of a model call's bookkeeping; appending a line to a file already open
costs a few microseconds. So each store (one per worker process, and per forked child) opens one
file, `transcripts/log-<host>-<pid>-<random>.jsonl`, the first time it finishes a question, and
appends each transcript to it as one line of compact JSON. The host, the process id and 64 random
bits keep two workers (threads of one process share their store's file; processes, machines on a
shared folder and resumed runs get their own) from ever writing one file.

A row names its record as `<file>#<offset>+<length>`: the byte where its line starts and the
line's length without its newline. Readers go straight to those bytes (`RecordPath`), so a row can
only ever read its own record, whatever else the file holds (the record of a question retried
after an error, one whose process died before its row). A record is whole or absent, as the
temporary-then-rename file it replaces was: the line is written, with one `write` (continued until
every byte is out), before the row's commit, so a committed row's record is all there; a process
killed mid-write leaves a torn final line that no row names, and that `records_in` leaves out
without a word. A failed write (a full disk) is cut back off the file, or the file is dropped
for the next question, so a later record never follows half of an earlier one.

Durability is the row's: neither is fsynced on SQLite (`synchronous=NORMAL`), so a record holds
against a crash of the process, not of the machine. On shared storage (PostgreSQL) each record is
`fdatasync`ed before its row commits: another machine reading a shared folder sees only what the
writer's client has sent to the server, and a transcript file written whole was sent on its close.

Old runs (a file per question, `transcripts/<condition>/<name>.json`) name plain files in their
rows and read as before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path, PosixPath

from medpanel.experiments.run.store.confined import Confined

LOG_FOLDER = "transcripts"
_REF = re.compile(r"^(?P<file>[^#]+\.jsonl)#(?P<offset>\d+)\+(?P<length>\d+)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_CHUNK = 1 << 20


def log_name(pid: int | None = None) -> str:
    """A new log's path inside the run directory: the host, the process and 64 random bits."""
    host = _UNSAFE.sub("_", socket.gethostname())[:40] or "host"
    return f"{LOG_FOLDER}/log-{host}-{os.getpid() if pid is None else pid}-{secrets.token_hex(8)}.jsonl"


def reference(relative_file: str, offset: int, length: int) -> str:
    """What a row stores for a record: its log file, the byte its line starts at and its length."""
    return f"{relative_file}#{offset}+{length}"


def parse_reference(ref: str) -> tuple[str, int, int] | None:
    """(file, offset, length) of a record's reference; None for a plain file (an older run's row)."""
    m = _REF.match(ref)
    return (m["file"], int(m["offset"]), int(m["length"])) if m else None


class TranscriptLog:
    """One worker's append-only transcript file, opened on the first append through the run
    directory's writer (no link followed, a new file never an existing one)."""

    def __init__(self, folder: Confined, *, sync: bool = False) -> None:
        self.folder = folder
        self.sync = sync
        """fdatasync each record before its row commits (shared storage)."""
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0
        self._name = ""
        self._end = 0
        self.opened = 0
        """Files this log has created (one unless a write failed or the process forked)."""

    @property
    def name(self) -> str:
        """The file now appended to, relative to the run directory ("" before the first record)."""
        return self._name

    def append(self, body: str) -> str:
        """Append `body` (one JSON document, no newline in it) as one line; the row's reference."""
        if "\n" in body:
            raise ValueError("a transcript record must be one line")  # json.dumps never writes one: a bug
        line = body.encode("utf-8") + b"\n"
        with self._lock:
            fd = self._open()
            start = self._end
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                if self.sync:
                    os.fdatasync(fd)
            except BaseException as exc:
                path = str(self.folder.path(self._name))
                self._cut(fd, start)
                if isinstance(exc, OSError) and exc.errno and exc.filename is None:
                    raise OSError(exc.errno, exc.strerror, path) from exc  # the log, for the stop's one line
                raise
            self._end = start + len(line)
            return reference(self._name, start, len(line) - 1)

    def _open(self) -> int:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        if self._fd is not None:  # a forked child: the parent's file is the parent's
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        name = log_name()
        self._fd = self.folder.open_new(name, append=True)
        self._pid, self._name, self._end = os.getpid(), name, 0
        self.opened += 1
        return self._fd

    def _cut(self, fd: int, start: int) -> None:
        """After a failed write: the file back to its last whole record, or given up for a new one."""
        try:
            os.ftruncate(fd, start)
        except OSError:
            with contextlib.suppress(OSError):
                os.close(fd)
            self._fd = None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None


class RecordPath(PosixPath):
    """A record inside a transcript log, as a path: the log file's path, whose `is_file`, `read_bytes`
    and `read_text` answer for the record alone. Readers that take a row's transcript path (tables,
    pages, exports) read either layout through it unchanged."""

    offset: int = 0
    length: int = 0

    @classmethod
    def of(cls, file: Path, offset: int, length: int) -> RecordPath:
        path = cls(file)
        path.offset, path.length = offset, length
        return path

    @property
    def where(self) -> str:
        """The file and the record's byte range, for messages."""
        return f"{self} (the record at byte {self.offset})"

    def is_file(self) -> bool:
        """The log is a regular file that holds the record: a JSON object's first byte where it
        starts, its newline where it ends (a log cut short, or bytes blanked out, hold none)."""
        try:
            fd = os.open(self, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            return os.pread(fd, 1, self.offset) == b"{" and os.pread(fd, 1, self.offset + self.length) == b"\n"
        finally:
            os.close(fd)

    def read_bytes(self) -> bytes:
        """The record's line without its newline; an OSError when it is not all there."""
        fd = os.open(self, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, self.length + 1, self.offset)
        finally:
            os.close(fd)
        if len(data) != self.length + 1 or data[-1:] != b"\n" or b"\n" in data[:-1]:
            raise OSError(errno.EIO, f"the record at byte {self.offset} ({self.length} bytes) is not a whole line "
                                     "of the transcript log", str(self))
        return data[:-1]

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def __reduce__(self) -> tuple[object, ...]:
        return (RecordPath.of, (Path(str(self)), self.offset, self.length))


def record_path(run_dir: Path, ref: str) -> Path:
    """A row's transcript as a path under `run_dir`: a `RecordPath` for a log record, else the file."""
    parsed = parse_reference(ref)
    if parsed is None:
        return Path(run_dir) / ref
    file, offset, length = parsed
    return RecordPath.of(Path(run_dir) / file, offset, length)


def records_in(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of each whole record of a log file, in order. Blank lines (the gaps a copy
    from shared storage leaves) are skipped; a torn final line (a process killed mid-write) is not
    a record and is left out without a word."""
    with open(path, "rb") as fh:
        offset = 0
        rest = b""
        while chunk := fh.read(_CHUNK):
            rest += chunk
            start = 0
            while (end := rest.find(b"\n", start)) >= 0:
                line = rest[start:end]
                if line.strip():
                    yield offset + start, line
                start = end + 1
            offset += start
            rest = rest[start:]


def copy_log(folder: Confined, name: str, records: list[tuple[int, int, str]], *, writing: str = "") -> int:
    """Another machine's log `name`, copied into `folder` with the records (offset, length, line) it
    lacks there at their offsets, the gaps (records no row names) as blank lines; a shorter copy made
    before is replaced whole. How many records were added. A log that holds every record asked for
    is left alone (a worker's own writes, here or on a shared folder, precede its rows' commits), as
    are one whose bytes would not line up and the log this process is `writing`."""
    if name == writing:
        return 0  # never replaced under its writer
    path = folder.path(name)
    have = path.read_bytes() if path.is_file() else b""
    missing = sorted(r for r in records if r[0] + r[1] + 1 > len(have))
    if not missing:
        return 0
    parts, end = [have], len(have)
    for offset, length, body in missing:
        line = body.encode("utf-8")
        if len(line) != length or offset < end:
            return 0  # not the bytes the row names: the file stays as it is
        if offset > end:
            parts.append(b" " * (offset - end - 1) + b"\n")
        parts.append(line + b"\n")
        end = offset + length + 1
    try:
        folder.write(name, b"".join(parts), durable=False, replace=bool(have))
    except FileExistsError:
        return 0  # copied meanwhile by another reader here
    return len(missing)


def log_files(run_dir: Path) -> list[Path]:
    """The transcript logs of a run directory, by name."""
    folder = Path(run_dir) / LOG_FOLDER
    return sorted(folder.glob("log-*.jsonl")) if folder.is_dir() else []


def documents(run_dir: Path) -> Iterator[bytes]:
    """Every transcript a run directory holds, as its JSON bytes, in either layout: the logs' whole
    records (a record no row names included: a question retried, or one whose process died before
    its row), then the files of an older run (`transcripts/<condition>/*.json`)."""
    folder = Path(run_dir) / LOG_FOLDER
    if not folder.is_dir():
        return
    for log in log_files(run_dir):
        for _, line in records_in(log):
            yield line
    for file in sorted(folder.rglob("*.json")):
        yield file.read_bytes()


def count_records(run_dir: Path) -> int:
    """How many transcripts `documents` finds."""
    return sum(1 for _ in documents(run_dir))
