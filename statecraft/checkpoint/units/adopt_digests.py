"""Digests of the files a framework has just written, taken at memory speed.

A framework (the Hugging Face ``Trainer``) writes a unit's files without telling us their
bytes, so the seal reads them back once. They sit in the page cache, still dirty: the seal's
cost is the digest pass plus the fsyncs that write them to disk. :func:`adopted_records`
makes the two overlap and spreads the digest over threads:

1. for each file, largest first, the kernel is asked to start writing its dirty pages
   (``sync_file_range(SYNC_FILE_RANGE_WRITE)`` on Linux: a hint that starts the disk early;
   it waits for nothing and makes nothing durable, so the seal's own fsync step is still
   what makes the files durable);
2. the file is hashed through a read-only mapping, in a pool of up to :data:`WORKERS`
   threads (``xxhash`` and ``hashlib`` release the GIL on large buffers), each file once.

The size recorded is the size of the mapping hashed (``fstat`` of the descriptor read), so
size and digest describe the same bytes. A store without local paths (the simulated
filesystem of the crash harness, object stores) is read sequentially through
:func:`~statecraft.storage.digest.file_digest`; the digests are the same.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.storage.base import Store
from statecraft.storage.digest import SAVE_ALGORITHM, Digest, file_digest, new_hasher
from statecraft.storage.filesystem import open_regular

__all__ = ["WORKERS", "adopted_records"]

#: the most threads hashing a unit's files at once
WORKERS = 4
_CHUNK = 16 << 20  # each hasher update: large enough to release the GIL, small enough to page
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages, wait for none


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux), or ``None`` where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # pragma: no cover - a libc without it
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages now (a hint; errors ignored: the
    fsync that follows reports any real I/O error)."""
    function = _sync_file_range()
    if function is not None:
        function(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def _local_entry(local: str) -> FileEntry:
    """Start the writeback of the regular file ``local``, then hash it through a mapping.

    Raises:
        SpecialFileError: ``local`` is a symlink, FIFO, directory or device.
        OSError: it cannot be opened or mapped.
    """
    fd = open_regular(local)
    try:
        start_writeback(fd)
        size = os.fstat(fd).st_size
        hasher = new_hasher(SAVE_ALGORITHM)
        if size:
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
                for offset in range(0, size, _CHUNK):
                    hasher.update(view[offset : offset + _CHUNK])
        return FileEntry(size, Digest(SAVE_ALGORITHM, hasher.hexdigest()))
    finally:
        os.close(fd)


def adopted_records(store: Store, unit: str, sizes: dict[str, int]) -> dict[str, FileEntry]:
    """Size and digest of every file ``name`` of ``sizes`` under ``unit`` (each read once; see
    the module docstring). ``sizes`` are the sizes found by the caller's ``stat``, used only to
    hash the largest files first.

    Raises:
        SpecialFileError / OSError: a file cannot be read as a regular file (the caller's
            seal then fails before its commit).
    """
    names: Sequence[str] = sorted(sizes, key=lambda n: (-sizes[n], n))
    locals_ = [store.local_path(f"{unit}/{name}") for name in names]
    if any(local is None for local in locals_):
        return {
            name: FileEntry(sizes[name], file_digest(store, f"{unit}/{name}")) for name in names
        }
    paths = [local for local in locals_ if local is not None]
    workers = max(1, min(WORKERS, len(paths), os.cpu_count() or 1))
    if workers == 1:
        entries = [_local_entry(path) for path in paths]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="statecraft-seal") as pool:
            entries = list(pool.map(_local_entry, paths))
    return dict(zip(names, entries, strict=True))
