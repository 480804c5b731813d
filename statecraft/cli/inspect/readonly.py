"""The read-only filesystem ``statecraft inspect`` reads through: every mutating operation of
:class:`~statecraft.storage.filesystem.Filesystem` is refused with a ``StoreError``."""

from __future__ import annotations

from typing import BinaryIO, NoReturn

from statecraft.errors import StoreError
from statecraft.storage.filesystem import FileStat, OsFilesystem

__all__ = ["ReadOnlyFilesystem"]


class ReadOnlyFilesystem:
    """The real filesystem with every mutating operation refused: inspect cannot write,
    even by accident through a store method that would."""

    def __init__(self) -> None:
        self._os = OsFilesystem()

    def __repr__(self) -> str:
        return "ReadOnlyFilesystem()"

    def _refuse(self, op: str, path: str) -> NoReturn:
        raise StoreError(f"statecraft inspect is read-only but something tried to {op} {path}")

    def open_write(self, path: str, *, exclusive: bool) -> int:
        self._refuse("open for writing", path)

    def write(self, handle: int, data: bytes | memoryview) -> None:
        self._refuse("write to handle", str(handle))

    def fsync(self, handle: int) -> None:
        self._refuse("fsync handle", str(handle))

    def start_writeback(self, handle: int, offset: int, length: int) -> None:
        self._refuse("start writeback of handle", str(handle))

    def close(self, handle: int) -> None:
        self._refuse("close handle", str(handle))

    def rename(self, src: str, dst: str) -> None:
        self._refuse("rename onto", dst)

    def link(self, src: str, dst: str) -> None:
        self._refuse("link", dst)

    def unlink(self, path: str) -> None:
        self._refuse("unlink", path)

    def mkdir(self, path: str) -> None:
        self._refuse("mkdir", path)

    def rmdir(self, path: str) -> None:
        self._refuse("rmdir", path)

    def fsync_dir(self, path: str) -> None:
        self._refuse("fsync directory", path)

    def sync_path(self, path: str) -> None:
        self._refuse("fsync", path)

    def listdir(self, path: str) -> list[str]:
        return self._os.listdir(path)

    def stat(self, path: str) -> FileStat | None:
        return self._os.stat(path)

    def read(self, path: str) -> bytes:
        return self._os.read(path)

    def open_read(self, path: str) -> BinaryIO:
        return self._os.open_read(path)

    def free_bytes(self, path: str) -> int | None:
        return self._os.free_bytes(path)

    def real_path(self, path: str) -> str | None:
        return path
