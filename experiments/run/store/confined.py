"""The one writer of a run directory's own files (and of the files put in a folder a user names):
no link followed, nothing written outside the folder, regular files and folders only.

A path is walked from the folder one component at a time on directory file descriptors, each
opened with `O_NOFOLLOW`: a symbolic link, a FIFO, a device or a socket where a file or a folder
is kept is refused (`UnsafePath`: one line naming it, the problem and the fix), never followed,
so a link planted in a run directory cannot make a resume or a report write into its target.
A file is written to a temporary sibling and renamed over its name: a hard link to the old file
under another name keeps what it held. The few files written in place (SQLite's study and its
journal, the response cache, the runner's lock, the model server's log) must have no other name,
and writers that open a path themselves (SQLite, diskcache) get it only after `check_file` or
`check_tree` walked it the same way.

The folder itself is taken as given (a run directory reached through a link the user made, such
as `runs/latest`, is that run); only what lies beneath it is walked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath, PurePosixPath

from medpanel.experiments.errors import UserError
from medpanel.inputs.files import kind_of as input_kind

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
Relative = str | PurePath
"""A path inside the folder, relative to it."""

PRIVATE, SHARED = 0o600, 0o666
"""A run's own records are private to their owner (transcripts hold whole debates, run.json the
scenario); reports and exports are made as any file is (the umask applies)."""


class UnsafePath(UserError):
    """A path the writer will not write: a link, a special file, a file with other names. Exit 2;
    met in the middle of a run it stops the run (resumably) with this line as the reason."""


def kind_of(mode: int) -> str:
    # The run directory is walked without following links, so a link is a kind here; every other
    # kind is named as the one reader of a user's files names it.
    return "a symbolic link" if stat.S_ISLNK(mode) else input_kind(mode)


def refusal(path: Path, info: os.stat_result, wanted: str, within: str = "a run directory") -> UnsafePath:
    """The one line for `path`, found to be `info` where a `wanted` ("file" or "folder") belongs."""
    if stat.S_ISLNK(info.st_mode):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        return UnsafePath(f"is a symbolic link{target}, where medpanel writes a {wanted}; it never writes through a "
                          f"link inside {within} (it could write outside it). Replace the link with the {wanted} "
                          "itself (cp -a --remove-destination), or remove it", file=str(path))
    if wanted == "file" and stat.S_ISREG(info.st_mode):  # a regular file with other names
        return UnsafePath(f"has {info.st_nlink} names (hard links), and it is written in place: a write here would "
                          f"change the file under its other names too. Give it a name of its own: cp {path} "
                          f"{path}.own && mv {path}.own {path}", file=str(path))
    return UnsafePath(f"is {kind_of(info.st_mode)}, where the run keeps a {wanted}. Remove or rename it",
                      file=str(path))


def new_temporary(folder: Path, name: str, mode: int, dir_fd: int, flags: int = 0) -> int:
    """A new file `name` in the folder open as `dir_fd` (`folder`), never an existing one or a link.
    Its own function: the disk-fault tests make it fail as a full disk would."""
    return os.open(name, _NEW_FILE | flags, mode, dir_fd=dir_fd)


def _parts(relative: Relative) -> tuple[str, ...]:
    parts = PurePosixPath(relative).parts
    if not parts or parts[0] == "/" or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{relative!r} is not a path inside the folder")  # a bug, not a user's mistake
    return parts


class Confined:
    """A folder whose paths are written without following a link (see the module's docstring)."""

    def __init__(self, root: Path, within: str = "a run directory", *, private: bool = True) -> None:
        self.root = Path(root)
        self.within = within
        """What the folder is, for the refusals' wording."""
        self.mode = PRIVATE if private else SHARED

    # -- walking -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _folder_fd(self, parts: tuple[str, ...], *, create: bool) -> Iterator[int | None]:
        """The descriptor of root/parts (None when a folder on the way is missing and not `create`)."""
        fd: int | None = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for n in range(len(parts)):
                assert fd is not None
                child = self._child(fd, parts[: n + 1], create)
                os.close(fd)
                fd = child
                if fd is None:
                    break
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def _child(self, fd: int, parts: tuple[str, ...], create: bool) -> int | None:
        """The folder parts[-1] inside `fd`, opened without following a link (made when `create`)."""
        name = parts[-1]
        try:
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    os.mkdir(name, 0o777, dir_fd=fd)
                return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                raise refusal(self.path(parts), info, "folder", self.within) from None
            raise OSError(exc.errno, exc.strerror, str(self.path(parts))) from None

    def path(self, relative: Relative | tuple[str, ...]) -> Path:
        parts = relative if isinstance(relative, tuple) else _parts(relative)
        return self.root.joinpath(*parts)

    @staticmethod
    def _entry(fd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    # -- writing -----------------------------------------------------------------------------

    def folder(self, relative: Relative, *, in_place: bool | None = None) -> Path:
        """root/relative made (with every folder on the way) or checked to be folders, not links.
        `in_place` not None: what it holds is checked too (`check_tree`), for a writer that opens
        the folder's files itself (diskcache)."""
        parts = _parts(relative)
        with self._folder_fd(parts, create=True):
            pass
        if in_place is not None:
            self._check_below(self.path(parts), in_place)
        return self.path(parts)

    def write(self, relative: Relative, data: str | bytes, *, durable: bool = True,
              replace: bool = True) -> Path:
        """`data` at root/relative whole or not at all: written to a temporary sibling, then renamed
        over the name, so no reader and no crash of this process meets half a file. The folders on
        the way are made. An existing entry that is not a regular file is refused; `replace=False`
        raises FileExistsError for any existing one. `durable=False` skips the fsync (the rename
        still holds against a crash of the process, not of the machine)."""
        parts = _parts(relative)
        path = self.path(parts)
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            with self._folder_fd(parts[:-1], create=True) as fd:
                assert fd is not None
                name = parts[-1]
                old = self._entry(fd, name)
                if old is not None:
                    if not replace:
                        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
                    if not stat.S_ISREG(old.st_mode):
                        raise refusal(path, old, "file", self.within)
                # A name of at most 255 bytes, whatever the original's characters: 100 bytes of it.
                tmp = f".{name.encode()[:100].decode(errors='ignore')}.{secrets.token_hex(4)}.tmp"
                out = new_temporary(path.parent, tmp, self.mode, fd)
                try:
                    with os.fdopen(out, "wb") as fh:
                        fh.write(raw)
                        if durable:
                            fh.flush()
                            os.fsync(fh.fileno())
                    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=fd)
                    raise
        except OSError as exc:
            if exc.errno and not isinstance(exc, FileExistsError):
                raise OSError(exc.errno, exc.strerror, str(path)) from exc  # the file meant, not its sibling
            raise
        return path

    def open_new(self, relative: Relative, *, append: bool = False) -> int:
        """A write descriptor of a new file root/relative (the folders on the way made): never an
        existing file or a link, so it has this one name and no other writer. `append`: O_APPEND
        (a transcript log, written in place one whole line at a time)."""
        parts = _parts(relative)
        try:
            with self._folder_fd(parts[:-1], create=True) as fd:
                assert fd is not None
                return new_temporary(self.path(parts[:-1]), parts[-1], self.mode, fd,
                                     os.O_APPEND if append else 0)
        except OSError as exc:
            if exc.errno and not isinstance(exc, FileExistsError):
                raise OSError(exc.errno, exc.strerror, str(self.path(parts))) from exc  # the whole path
            raise

    def overwrite_in_place(self, relative: Relative, data: bytes) -> bool:
        """Write `data` over an existing regular file of one name, padded with spaces to its size,
        within the blocks it has (a full disk takes no new file): status.json's last word. False,
        having written nothing, when the file is missing or smaller than `data`."""
        parts = _parts(relative)
        with self._folder_fd(parts[:-1], create=False) as fd:
            if fd is None or self._entry(fd, parts[-1]) is None:
                return False
            out = self._open_own(fd, parts, os.O_WRONLY)
            try:
                size = os.fstat(out).st_size
                if len(data) > size:
                    return False
                os.pwrite(out, data + b" " * (size - len(data)), 0)
                os.fsync(out)
            finally:
                os.close(out)
        return True

    def open_own(self, relative: Relative) -> int:
        """A read-write descriptor of root/relative, made if missing: a regular file with no other name
        (what is written in place, such as the runner's lock), never a link or a FIFO."""
        parts = _parts(relative)
        with self._folder_fd(parts[:-1], create=True) as fd:
            assert fd is not None
            return self._open_own(fd, parts, os.O_RDWR | os.O_CREAT)

    def _open_own(self, fd: int, parts: tuple[str, ...], flags: int) -> int:
        path = self.path(parts)
        try:
            # O_NONBLOCK: opening a FIFO never waits for a writer; fstat then refuses it.
            out = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, self.mode,
                          dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise
            raise refusal(path, os.stat(parts[-1], dir_fd=fd, follow_symlinks=False), "file", self.within) from None
        info = os.fstat(out)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            os.close(out)
            raise refusal(path, info, "file", self.within)
        os.set_blocking(out, True)
        return out

    def unlink(self, relative: Relative) -> None:
        """Remove the name root/relative (a link is removed, never its target); gone already is fine."""
        parts = _parts(relative)
        with self._folder_fd(parts[:-1], create=False) as fd:
            if fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(parts[-1], dir_fd=fd)

    def identity(self, relative: Relative) -> tuple[int, int] | None:
        """(device, inode) of the entry root/relative itself (a link's own), None when absent."""
        parts = _parts(relative)
        with self._folder_fd(parts[:-1], create=False) as fd:
            info = None if fd is None else self._entry(fd, parts[-1])
        return None if info is None else (info.st_dev, info.st_ino)

    # -- checks for writers that open a path themselves ---------------------------------------

    def check_file(self, relative: Relative, *, in_place: bool = False) -> Path:
        """root/relative is absent or a regular file, reached through folders only. `in_place`: it
        is written in place (SQLite), so it must also have no other name."""
        parts = _parts(relative)
        path = self.path(parts)
        with self._folder_fd(parts[:-1], create=False) as fd:
            info = None if fd is None else self._entry(fd, parts[-1])
        if info is not None and (not stat.S_ISREG(info.st_mode) or (in_place and info.st_nlink > 1)):
            raise refusal(path, info, "file", self.within)
        return path

    def check_tree(self, relative: Relative, *, in_place: bool = False) -> Path:
        """root/relative is absent or a folder holding only folders and regular files, at any depth
        (`in_place`: files of one name each)."""
        parts = _parts(relative)
        path = self.path(parts)
        with self._folder_fd(parts[:-1], create=False) as fd:
            info = None if fd is None else self._entry(fd, parts[-1])
        if info is None:
            return path
        if not stat.S_ISDIR(info.st_mode):
            raise refusal(path, info, "folder", self.within)
        self._check_below(path, in_place)
        return path

    def _check_below(self, folder: Path, in_place: bool) -> None:
        # scandir reads each entry's type from the folder itself: no stat per file for the common case.
        # An entry a live run renames or removes meanwhile (a temporary file, a cache entry) is skipped.
        with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    if entry.is_dir(follow_symlinks=False):
                        self._check_below(Path(entry.path), in_place)
                    elif not entry.is_file(follow_symlinks=False) or (
                            in_place and entry.stat(follow_symlinks=False).st_nlink > 1):
                        raise refusal(Path(entry.path), entry.stat(follow_symlinks=False), "file", self.within)
