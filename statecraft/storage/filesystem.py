"""The small filesystem interface ``LocalStore`` is written against, and the real OS one.

``LocalStore`` performs every local I/O through a :class:`Filesystem`, so the crash harness can
run the very same store over :class:`~statecraft.storage.simfs.SimFilesystem`, which applies
the power-loss rules of DESIGN.md §4. Paths are absolute POSIX strings.

Mutating operations (open for write, write, fsync, close, rename, link, unlink, mkdir, rmdir,
fsync of a directory) each pass the optional :class:`~statecraft.engine.crash.IoGate` first, so
each is a crash point. Reads are not crash points: a crash before a read leaves the same
durable state as a crash after the previous mutation.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import stat as stat_module
from collections.abc import Callable
from typing import BinaryIO, Protocol, runtime_checkable

import attrs

from statecraft.engine.crash import Fault, FaultKind, IoGate
from statecraft.errors import SpecialFileError

__all__ = [
    "MAX_CONTROL_BYTES",
    "FileStat",
    "Filesystem",
    "OsFilesystem",
    "fault_error",
    "open_regular",
]

MAX_CONTROL_BYTES = 16 << 20  # Filesystem.read refuses a control file (JSON, text) above this


def _default_kind(stat: FileStat) -> str:
    return "directory" if stat.is_dir else "file"


@attrs.frozen
class FileStat:
    """What ``stat`` says of a name: its size, whether it is a directory, and its kind:
    ``"file"`` (regular), ``"directory"``, or, where a real filesystem holds one,
    ``"symlink"`` (a link to anything but a directory; ``size`` is the link's own),
    ``"fifo"``, ``"device"``, ``"socket"``. ``link`` is true for a symlink to a directory
    (reported as a directory so an output root may be a link, but never descended into when
    a tree is deleted)."""

    size: int
    is_dir: bool
    kind: str = attrs.field(default=attrs.Factory(_default_kind, takes_self=True))
    link: bool = False


def fault_error(fault: Fault, op: str, path: str) -> OSError:
    """The ``OSError`` an injected fault turns into."""
    code = errno.ENOSPC if fault.kind is FaultKind.NO_SPACE else errno.EIO
    return OSError(code, f"injected {fault.kind.value} at I/O op #{fault.index} ({op})", path)


@runtime_checkable
class Filesystem(Protocol):
    """What ``LocalStore`` needs of a filesystem. Handles are opaque integers.

    Implementations: :class:`OsFilesystem`, :class:`~statecraft.storage.simfs.SimFilesystem`,
    the read-only one of ``statecraft inspect``; ``tests/test_protocols.py`` checks each with
    :func:`statecraft.storage.base.missing_members` (``isinstance`` on this runtime-checkable
    protocol also works, without naming what is missing).
    """

    def open_write(self, path: str, *, exclusive: bool) -> int:
        """Create ``path`` for writing (``exclusive``: fail with ``FileExistsError`` if it
        exists; otherwise truncate an existing file)."""

    def write(self, handle: int, data: bytes | memoryview) -> None:
        """Append all of ``data`` at the handle's position."""

    def fsync(self, handle: int) -> None:
        """Make the file's written data durable. An error means that data is lost."""

    def start_writeback(self, handle: int, offset: int, length: int) -> None:
        """Hint: begin writing ``[offset, offset+length)`` to the device now, without waiting,
        so the commit's ``fsync`` finds less left to do. Durability still comes only from
        ``fsync``; a filesystem may ignore the hint. Not a crash point (nothing changes)."""

    def close(self, handle: int) -> None: ...

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` by ``src`` (durable after the parent's fsync)."""

    def link(self, src: str, dst: str) -> None:
        """Give ``src``'s file the name ``dst``; ``FileExistsError`` if ``dst`` exists."""

    def unlink(self, path: str) -> None: ...

    def mkdir(self, path: str) -> None: ...

    def rmdir(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None:
        """Make creates, renames and unlinks inside directory ``path`` durable."""

    def sync_path(self, path: str) -> None:
        """``fsync`` an existing file or directory by name (making durable what a crashed
        process left in the page cache before anything relies on it)."""

    def listdir(self, path: str) -> list[str]: ...

    def stat(self, path: str) -> FileStat | None:
        """Size and kind of ``path``, or ``None`` when it does not exist."""

    def read(self, path: str) -> bytes:
        """All bytes of the regular file ``path`` (a control file: a manifest, the latest
        pointer, a marker), at most :data:`MAX_CONTROL_BYTES`.

        Raises:
            SpecialFileError: ``path`` is a symlink, FIFO, directory or device, or too large.
        """

    def open_read(self, path: str) -> BinaryIO:
        """A binary reader of the regular file ``path`` (never follows a symlink, never blocks
        on a FIFO).

        Raises:
            SpecialFileError: ``path`` is not a regular file.
        """

    def free_bytes(self, path: str) -> int | None:
        """Bytes an unprivileged writer can still write on the filesystem holding ``path``
        (``None`` when unknown)."""

    def real_path(self, path: str) -> str | None:
        """An OS path usable for ``mmap`` (``None`` for simulated filesystems)."""


def _kind(mode: int) -> str:
    if stat_module.S_ISLNK(mode):
        return "symlink"
    if stat_module.S_ISFIFO(mode):
        return "fifo"
    if stat_module.S_ISDIR(mode):
        return "directory"
    if stat_module.S_ISSOCK(mode):
        return "socket"
    if stat_module.S_ISCHR(mode) or stat_module.S_ISBLK(mode):
        return "device"
    return "special file"


def open_regular(path: str, *, limit: int | None = None) -> int:
    """Open ``path`` read-only as a regular file and return the descriptor.

    The final component is opened with ``O_NOFOLLOW`` (a symlink is refused, not followed)
    and ``O_NONBLOCK`` (a FIFO cannot block the open), then ``fstat`` must say regular file
    (and, with ``limit``, at most that many bytes). Directories above ``path`` may be links.

    Raises:
        SpecialFileError: a symlink (or a symlink loop), FIFO, directory, device or socket,
            or a file over ``limit``.
        FileNotFoundError / OSError: as ``open`` raises them otherwise.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW on a symlink
            raise SpecialFileError(path, "symlink") from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO/device that refuses
            raise SpecialFileError(path, _kind(os.lstat(path).st_mode)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):
            raise SpecialFileError(path, _kind(st.st_mode))
        if limit is not None and st.st_size > limit:
            raise SpecialFileError(
                path,
                "too large",
                f"it holds {st.st_size:,} bytes, more than the {limit:,} a control file may",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux), or ``None`` where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE_WRITE = 2


class OsFilesystem:
    """The real filesystem through ``os`` calls.

    Args:
        gate: optional I/O gate; tests use it to crash or inject faults on the real disk.
    """

    def __init__(self, *, gate: IoGate | None = None) -> None:
        self.gate = gate

    def __repr__(self) -> str:
        return "OsFilesystem()"

    def _io(self, op: str, path: str) -> None:
        if self.gate is not None:
            fault = self.gate.before_io(op, path)
            if fault is not None:
                raise fault_error(fault, op, path)

    def open_write(self, path: str, *, exclusive: bool) -> int:
        self._io("open_write", path)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)

    def write(self, handle: int, data: bytes | memoryview) -> None:
        self._io("write", str(handle))
        view = memoryview(data).cast("B")
        while view:
            written = os.write(handle, view)
            view = view[written:]

    def fsync(self, handle: int) -> None:
        self._io("fsync", str(handle))
        os.fsync(handle)

    def start_writeback(self, handle: int, offset: int, length: int) -> None:
        function = _sync_file_range()
        if function is not None:  # a failure here is reported by the fsync that follows
            function(handle, offset, length, _SYNC_FILE_RANGE_WRITE)

    def close(self, handle: int) -> None:
        os.close(handle)

    def rename(self, src: str, dst: str) -> None:
        self._io("rename", dst)
        os.rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        self._io("link", dst)
        os.link(src, dst)

    def unlink(self, path: str) -> None:
        self._io("unlink", path)
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        self._io("mkdir", path)
        os.mkdir(path)

    def rmdir(self, path: str) -> None:
        self._io("rmdir", path)
        os.rmdir(path)

    def fsync_dir(self, path: str) -> None:
        self._io("fsync_dir", path)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync_path(self, path: str) -> None:
        self._io("sync_path", path)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def stat(self, path: str) -> FileStat | None:
        """Size and kind of ``path`` itself. A symlink to a directory is followed (an output
        root may be a link); any other symlink (to a file, a device, dangling, a loop) is
        reported as ``kind="symlink"`` with the link's own size, never followed and never a
        raw ``ELOOP``; FIFOs, devices and sockets are reported by kind."""
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat_module.S_ISLNK(st.st_mode):
            try:
                target = os.stat(path)
            except OSError:  # dangling or a loop
                target = None
            if target is not None and stat_module.S_ISDIR(target.st_mode):
                return FileStat(size=target.st_size, is_dir=True, link=True)
            return FileStat(size=st.st_size, is_dir=False, kind="symlink")
        if stat_module.S_ISDIR(st.st_mode):
            return FileStat(size=st.st_size, is_dir=True)
        kind = "file" if stat_module.S_ISREG(st.st_mode) else _kind(st.st_mode)
        return FileStat(size=st.st_size, is_dir=False, kind=kind)

    def read(self, path: str) -> bytes:
        fd = open_regular(path, limit=MAX_CONTROL_BYTES)
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_CONTROL_BYTES + 1)
        if len(data) > MAX_CONTROL_BYTES:  # it grew after the size check
            raise SpecialFileError(
                path, "too large", f"it holds more than the {MAX_CONTROL_BYTES:,} bytes allowed"
            )
        return data

    def open_read(self, path: str) -> BinaryIO:
        return os.fdopen(open_regular(path), "rb")

    def free_bytes(self, path: str) -> int | None:
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def real_path(self, path: str) -> str | None:
        return path
