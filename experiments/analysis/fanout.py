"""A report's work spread over forked processes: contiguous chunks, handed back in chunk order.

`medpanel report` decodes hundreds of megabytes of transcripts and `report --html` writes a page
per question; both are the same work on each chunk of rows (or questions), so `fan_out` forks
`processes - 1` workers that take chunks from a shared queue (a pipe holding the chunk numbers, read
four bytes at a time, so no two processes take the same chunk and a fast one takes more) while this
process, the parent, first does its own work (`meanwhile`: the statistics' imports, the tables that
need no transcript) and then takes chunks too. A worker writes each chunk's result, encoded by the
caller, to a file of its own and says so on a pipe; the parent decodes the results as they come,
between its own chunks, so it is never waiting on a worker while it has work, and no worker waits on
the parent. The results come back in chunk order, whoever made them.

Why fork: the workers start in a millisecond with everything the parent has read (the rows, the run
record, the imports), without pickling any of it. Forking is safe only with no other thread
running: with one alive (a library's, a caller's), `fan_out` runs every chunk here instead, as it
does off Linux. (numpy's OpenBLAS keeps native threads, which its own fork handler stops and
restarts.) A worker ends with `os._exit`: nothing of the parent's (buffered output, `atexit`
functions, `finally` blocks up the stack) runs twice.

A chunk whose work fails stops the run at it: the worker that met it empties the queue (the chunks
after it are never started) and its result carries the error; the caller raises the first error in
chunk order, so the error is the one a single process meets first. A worker that dies without a word
(killed) leaves its chunk to the parent, which does it itself.

`process_count` is how many processes: the CPUs this process may use (`os.sched_getaffinity`), at
most `MAX_PROCESSES`, and one per `ROWS_PER_PROCESS` rows at least (below that, forking does not
pay); `medpanel report --processes N` asks for N (1: this process alone).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import struct
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_PROCESSES = 8
"""More than this rarely pays: the parent decodes every worker's results and builds the tables alone."""
ROWS_PER_PROCESS = 400
"""Rows a process must have to pay for its fork and its results' trip back (a few tens of
milliseconds); a run smaller than two processes' worth is read in one."""
CHUNKS_PER_PROCESS = 8
"""Chunks per process: small enough that a busy core's process takes fewer, big enough that each
result's trip back is a few hundred kilobytes."""

_CHUNK = struct.Struct("<I")
_NOTICE = struct.Struct("<IIQQ")
"""chunk, worker, offset, length: what a worker writes on the notice pipe for each chunk it did
(shorter than PIPE_BUF, so each write is whole on the pipe whatever the other workers write)."""
_OK, _FAILED = b"r", b"x"


def process_count(requested: int | None, rows: int) -> int:
    """The processes for `rows` rows: `requested` when given, else the CPUs this process may use, at
    most `MAX_PROCESSES` and one per `ROWS_PER_PROCESS` rows (1 below two processes' worth)."""
    if requested is not None:
        return max(1, requested)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: the CPUs there are
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_PROCESSES, rows // ROWS_PER_PROCESS))


def chunk_bounds(n: int, processes: int) -> list[tuple[int, int]]:
    """`n` items as contiguous chunks `(start, stop)`, `CHUNKS_PER_PROCESS` per process at most."""
    if n <= 0:
        return []
    count = min(n, max(1, processes) * CHUNKS_PER_PROCESS) if processes > 1 else 1
    return [(n * i // count, n * (i + 1) // count) for i in range(count)]


@dataclass(frozen=True)
class Done(Generic[R]):
    """One chunk's result, and whether the run stops at it (its work met an error)."""

    result: R
    stop: bool = False


class WorkerFailed(RuntimeError):
    """A worker's exception that could not be sent whole: its traceback as text."""


def _can_fork() -> bool:
    """Linux (where a fork after macOS's system frameworks is not a worry) with no other thread."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


def fan_out(chunks: Sequence[T], work: Callable[[T], Done[R]], processes: int, *,
            encode: Callable[[R], bytes], decode: Callable[[T, bytes], R],
            meanwhile: Callable[[], None] | None = None) -> list[R]:
    """`work` on each chunk, in `processes` processes (this one and forked workers), the results in
    chunk order up to the first that stops the run (included). `encode` runs in a worker on its
    result, `decode` in this process on those bytes; this process's own results are passed as they
    are. `meanwhile` runs here once the workers have started (first, with one process). A worker's
    unexpected exception is raised here, at its chunk's place in the order."""
    if processes <= 1 or len(chunks) <= 1 or not _can_fork():
        if meanwhile is not None:
            meanwhile()
        return _serial(chunks, work)
    with _Workers(chunks, work, min(processes, len(chunks)) - 1, encode) as workers:
        if meanwhile is not None:
            meanwhile()
        return workers.collect(decode)


def in_child(fn: Callable[[], R], *, fork: bool = True) -> Callable[[], R]:
    """`fn` run in a forked process while this one goes on; call what is returned for its result
    (its exception raised here). With `fork` False, or where `fan_out` would not fork, `fn` runs
    here first. For one piece of work beside the parent's own (a figure, a table) once the
    transcripts are read."""
    if not fork or not _can_fork():
        value = fn()
        return lambda: value
    out = tempfile.TemporaryFile(prefix="medpanel-report-")
    _flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side; its result is what the tests compare
        status = 1
        try:
            try:
                data = pickle.dumps((True, fn()), protocol=5)
            except Exception as exc:  # raised by the parent when it asks for the result
                data = pickle.dumps((False, portable(exc)), protocol=5)
            os.pwrite(out.fileno(), data, 0)
            status = 0
        finally:
            os._exit(status)

    def wait() -> R:
        try:
            _reap(pid)
            out.seek(0)
            data = out.read()
        finally:
            out.close()
        if not data:
            raise WorkerFailed("a report worker ended without its result (killed?)")
        ok, got = pickle.loads(data)
        if not ok:
            raise got
        return got  # type: ignore[no-any-return]

    return wait


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):  # what is buffered is this process's to write, not a child's
        with contextlib.suppress(Exception):
            stream.flush()


def _serial(chunks: Sequence[T], work: Callable[[T], Done[R]]) -> list[R]:
    out: list[R] = []
    for chunk in chunks:
        done = work(chunk)
        out.append(done.result)
        if done.stop:
            break
    return out


def _take(queue: int) -> int | None:
    """The next chunk number from the queue pipe, None when it is empty (every chunk taken)."""
    data = os.read(queue, _CHUNK.size)
    return _CHUNK.unpack(data)[0] if data else None


def _empty(queue: int) -> None:
    """Take every chunk left, so no process starts one after a chunk that stopped the run."""
    while os.read(queue, 4096):
        pass


class _Workers(Generic[T, R]):
    """The forked workers of one `fan_out`, and this process's side: the queue, the notices, the files."""

    def __init__(self, chunks: Sequence[T], work: Callable[[T], Done[R]], count: int,
                 encode: Callable[[R], bytes]) -> None:
        self.chunks, self.work = chunks, work
        self.done: dict[int, tuple[R | BaseException, bool]] = {}
        self.pids: list[int] = []
        self.queue, writer = os.pipe()
        os.write(writer, b"".join(_CHUNK.pack(i) for i in range(len(chunks))))  # 4 bytes each: the pipe holds them
        os.close(writer)  # empty is the end: every process reads EOF once the chunks are taken
        self.notices, notify = os.pipe()
        self.files: list[IO[bytes]] = [tempfile.TemporaryFile(prefix="medpanel-report-") for _ in range(count)]
        # What this process holds now is left out of the collector's passes while the workers live:
        # a pass writes to every object it walks, and each page written would become a copy here
        # while the worker keeps the original (the report's peak memory grew by the whole heap).
        self.froze = gc.get_freeze_count() == 0
        if self.froze:
            gc.freeze()
        _flush()
        try:
            for n in range(count):
                try:
                    pid = os.fork()
                except OSError:  # no more processes now (a limit, memory): the ones started do the work
                    break
                if pid == 0:  # pragma: no cover - the child's side; its results are what the tests compare
                    status = 1
                    try:
                        os.close(self.notices)
                        self._child(n, notify, encode)
                        status = 0
                    finally:
                        os._exit(status)  # never the parent's atexit, buffers or finally blocks
                self.pids.append(pid)
        finally:
            os.close(notify)  # the workers hold it: EOF once the last has exited
        os.set_blocking(self.notices, False)
        self.pending = b""

    # -- a worker ------------------------------------------------------------------------------

    def _child(self, n: int, notify: int, encode: Callable[[R], bytes]) -> None:  # pragma: no cover
        fd = self.files[n].fileno()
        offset = 0
        while (i := _take(self.queue)) is not None:
            try:
                done = self.work(self.chunks[i])
                data, stop = _OK + encode(done.result), done.stop
            except Exception as exc:  # sent to the parent, which raises it at its chunk
                data, stop = _FAILED + _pickled(exc), True
            os.pwrite(fd, data, offset)
            os.write(notify, _NOTICE.pack(i, n, offset, len(data)))
            offset += len(data)
            if stop:
                _empty(self.queue)

    # -- this process -------------------------------------------------------------------------

    def collect(self, decode: Callable[[T, bytes], R]) -> list[R]:
        """This process takes chunks too, decoding what the workers sent between them, then waits
        for the rest; the results in order, up to the first that stops the run."""
        while True:
            self._receive(decode, wait=False)
            i = _take(self.queue)
            if i is None:
                break
            try:
                done = self.work(self.chunks[i])
                self.done[i] = (done.result, done.stop)
            except Exception as exc:  # raised at its chunk's place, as a worker's would be
                self.done[i] = (exc, True)
            if self.done[i][1]:
                _empty(self.queue)
        while self._receive(decode, wait=True):
            pass
        return self._in_order()

    def _receive(self, decode: Callable[[T, bytes], R], *, wait: bool) -> bool:
        """Decode the results the workers have announced; False once every worker has exited."""
        if wait:
            select.select([self.notices], [], [])
        try:
            data = os.read(self.notices, _NOTICE.size * 256)
        except BlockingIOError:
            return True
        if not data:
            return False
        data, self.pending = self.pending + data, b""
        whole = len(data) - len(data) % _NOTICE.size
        data, self.pending = data[:whole], data[whole:]
        for i, n, offset, length in _NOTICE.iter_unpack(data):
            raw = os.pread(self.files[n].fileno(), length, offset)
            if raw[:1] == _OK:
                self.done[i] = (decode(self.chunks[i], raw[1:]), False)
            else:
                self.done[i] = (pickle.loads(raw[1:]), True)
        return True

    def _in_order(self) -> list[R]:
        out: list[R] = []
        for i, chunk in enumerate(self.chunks):
            if i not in self.done:  # its worker died without a word (killed): done here
                done = self.work(chunk)
                self.done[i] = (done.result, done.stop)
            result, stop = self.done[i]
            if isinstance(result, BaseException):
                raise result
            out.append(result)
            if stop:
                break
        return out

    def __enter__(self) -> _Workers[T, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        """Every worker waited for (on an error here, once the queue is emptied: each ends its
        chunk, so no file is left half written), the pipes and files closed."""
        if exc[0] is not None:
            with contextlib.suppress(OSError):
                _empty(self.queue)
        try:
            for pid in self.pids:
                _reap(pid)
        finally:
            if self.froze:
                gc.unfreeze()
            os.close(self.queue)
            os.close(self.notices)
            for f in self.files:
                f.close()


def _reap(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:  # pragma: no cover - retried by Python itself since 3.5
            continue


def portable(exc: BaseException) -> BaseException:
    """The exception as a worker sends it: itself when it survives pickling whole (a `UserError`
    keeps its message, file and field), else its traceback as text in a `WorkerFailed`."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # any exception that cannot travel travels as text
        text = "".join(traceback.format_exception(exc)).rstrip()
        return WorkerFailed(f"a report worker failed:\n{text}")


def _pickled(exc: BaseException) -> bytes:  # pragma: no cover - runs in a worker
    return pickle.dumps(portable(exc))
