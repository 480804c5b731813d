"""``ObjectStore``: the :class:`~statecraft.storage.base.Store` adapter over any bucket.

Semantics modelled (DESIGN.md §4): a PUT is atomic per key and then strongly consistent;
there is no rename and no multi-key atomicity; ``If-None-Match: *`` (create only if absent)
and ``If-Match: <etag>`` (replace only that version) are the only compare-and-swap. A request
whose response never arrived is indeterminate: it may or may not have taken effect, so
recovery must look.

The bucket protocols and records live in :mod:`statecraft.storage.bucket`, the simulated
bucket of the crash harness in :mod:`statecraft.storage.sim_bucket`; both are re-exported
here, where callers have always found them.
"""

from __future__ import annotations

import io
from types import TracebackType
from typing import BinaryIO

from statecraft.errors import ObjectRequestError, PreconditionFailed, StoreConflictError, StoreError
from statecraft.storage.base import FileRecord, check_range, check_relative_path
from statecraft.storage.bucket import ArchiveBucket, BucketClient, ObjectInfo, RemoteObject
from statecraft.storage.digest import StreamDigest
from statecraft.storage.filesystem import FileStat
from statecraft.storage.sim_bucket import SIM_IDENTITY, SimBucket

__all__ = [
    "SIM_IDENTITY",
    "ArchiveBucket",
    "BucketClient",
    "ObjectInfo",
    "ObjectRequestError",
    "ObjectStore",
    "PreconditionFailed",
    "RemoteObject",
    "SimBucket",
]


class ObjectAtomicWriter:
    """Buffers the bytes and PUTs them on commit (conditional create when exclusive)."""

    def __init__(self, store: ObjectStore, path: str, *, exclusive: bool) -> None:
        self.path = path
        self.record: FileRecord | None = None
        self._store = store
        self._exclusive = exclusive
        self._buffer = io.BytesIO()
        self._digest = StreamDigest()
        self._open = True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if not self._open:
            raise StoreError(f"{self.path}: write after commit or abort")
        view = memoryview(data).cast("B")
        self._digest.start(view)
        self._digest.join()  # the caller may reuse its buffer once write returns
        return self._buffer.write(view)

    def flush(self) -> None:
        """No-op: the object is sent whole at commit."""

    def commit(self) -> FileRecord:
        if not self._open:
            raise StoreError(f"{self.path}: commit after commit or abort")
        self._open = False
        data = self._buffer.getvalue()
        key = self._store.key(self.path)
        try:
            self._store.client.put(key, data, if_none_match=self._exclusive)
        except PreconditionFailed:
            raise StoreConflictError(
                f"{self._store.describe()}: {self.path!r} already exists; an exclusive create "
                "never overwrites. Inspect the existing object before deciding what to do"
            ) from None
        self.record = FileRecord(self.path, len(data), self._digest.digest())
        return self.record

    def abort(self) -> None:
        self._open = False

    def __enter__(self) -> ObjectAtomicWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        elif issubclass(exc_type, Exception):
            self.abort()


class ObjectStore:
    """The :class:`~statecraft.storage.base.Store` interface over a bucket and a key prefix.

    Directories are key prefixes: :meth:`make_dirs` does nothing, :meth:`list` reports the
    next path segment of every key under the prefix.
    """

    def __init__(self, client: BucketClient, *, prefix: str = "", name: str = "bucket") -> None:
        self.client = client
        self.prefix = prefix.strip("/")
        self.name = name

    def __repr__(self) -> str:
        return f"ObjectStore({self.describe()!r})"

    def describe(self) -> str:
        return f"s3://{self.name}/{self.prefix}"

    def key(self, path: str) -> str:
        if path == "":
            return self.prefix
        path = check_relative_path(path)
        return f"{self.prefix}/{path}" if self.prefix else path

    def open_atomic(
        self, path: str, *, exclusive: bool = False, defer_sync: bool = False
    ) -> ObjectAtomicWriter:
        """A writer for ``path`` (``defer_sync`` changes nothing: a completed PUT is durable)."""
        return ObjectAtomicWriter(self, path, exclusive=exclusive)

    def write_atomic(self, path: str, data: bytes) -> FileRecord:
        with self.open_atomic(path) as writer:
            writer.write(data)
        return writer.record  # type: ignore[return-value]

    def create_exclusive(self, path: str, data: bytes) -> FileRecord:
        with self.open_atomic(path, exclusive=True) as writer:
            writer.write(data)
        return writer.record  # type: ignore[return-value]

    def put_if(self, path: str, data: bytes, *, if_match: str | None, if_none_match: bool) -> str:
        """PUT ``data`` at ``path`` on a condition; returns the new etag.

        ``if_none_match`` creates only when nothing is there (``If-None-Match: *``);
        ``if_match`` replaces only the version with that etag (``If-Match``); neither is an
        unconditional PUT. Exactly one compare-and-swap per call: what the object-store lease
        and the fenced ``latest`` pointer are built on.

        Raises:
            ValueError: both conditions given.
            PreconditionFailed: the condition did not hold; nothing changed.
            ObjectRequestError: the request failed or its outcome is unknown (look before
                concluding: :meth:`stat_etag`).
        """
        if if_none_match and if_match is not None:
            raise ValueError(f"put_if({path!r}): give if_match or if_none_match, not both")
        return self.client.put(self.key(path), data, if_none_match=if_none_match, if_match=if_match)

    def stat_etag(self, path: str) -> str | None:
        """The etag of the object at ``path`` (one HEAD); ``None`` when absent.

        Raises:
            ObjectRequestError: the request failed.
        """
        info = self.client.head(self.key(path))
        return None if info is None else info.etag

    def read_bytes(self, path: str) -> bytes:
        return self.client.get(self.key(path))

    def open_read(self, path: str) -> BinaryIO:
        return io.BytesIO(self.read_bytes(path))

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """A ranged GET when the client has ``get_range`` (``S3Bucket``, ``SimBucket``); a
        whole GET sliced otherwise."""
        check_range(path, offset, length)
        key = self.key(path)
        if length == 0:
            if self.client.head(key) is None:
                raise FileNotFoundError(f"{self.describe()}: no object {path!r}")
            return b""
        get_range = getattr(self.client, "get_range", None)
        if callable(get_range):
            return bytes(get_range(key, offset, length))
        return self.client.get(key)[offset : offset + length]

    def local_path(self, path: str) -> str | None:
        return None

    def stat(self, path: str) -> FileStat | None:
        info = self.client.head(self.key(path))
        if info is not None:
            return FileStat(info.size, False)
        base = self.key(path)
        if self.client.list(f"{base}/" if base else ""):
            return FileStat(0, True)
        return None

    def list(self, path: str = "") -> list[str]:
        base = self.key(path)
        prefix = f"{base}/" if base else ""
        names = {k[len(prefix) :].split("/", 1)[0] for k in self.client.list(prefix)}
        return sorted(n for n in names if n)

    def make_dirs(self, path: str, *, defer_sync: bool = False) -> None:
        check_relative_path(path)

    def make_durable(self, path: str) -> None:
        """Nothing to do: a completed PUT is durable."""
        check_relative_path(path)

    def delete(self, path: str) -> None:
        self.client.delete(self.key(path))

    def delete_tree(self, path: str) -> None:
        base = self.key(path)
        if base and self.client.head(base) is not None:
            self.client.delete(base)
        for key in self.client.list(f"{base}/" if base else ""):
            self.client.delete(key)
