"""Object-store semantics: a bucket client interface, a simulated bucket, and the ``Store``
adapter over any bucket.

Semantics modelled (DESIGN.md §4): a PUT is atomic per key and then strongly consistent;
there is no rename and no multi-key atomicity; ``If-None-Match: *`` (create only if absent)
and ``If-Match: <etag>`` (replace only that version) are the only compare-and-swap. A request
whose response never arrived is indeterminate: it may or may not have taken effect, so
recovery must look. The crash harness covers both outcomes of a request in flight at a crash
(crash before the request = not applied; crash before the next request = applied) and injects
the third case, "applied but the client saw an error", as a ``LOST_RESPONSE`` fault.
"""

from __future__ import annotations

import hashlib
import io
from typing import BinaryIO, Protocol

import attrs

from statecraft.engine.crash import FaultKind, IoGate
from statecraft.errors import ObjectRequestError, PreconditionFailed, StoreConflictError, StoreError
from statecraft.storage.base import FileRecord, Store, check_range, check_relative_path
from statecraft.storage.digest import StreamDigest
from statecraft.storage.filesystem import FileStat
from statecraft.storage.s3_credentials import S3Identity

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


@attrs.frozen
class ObjectInfo:
    size: int
    etag: str


@attrs.frozen
class RemoteObject:
    """What a HEAD says of an object: size, etag, and the sha256 statecraft stored in its
    metadata when it wrote it (``""`` for an object written by someone else)."""

    size: int
    etag: str
    sha256: str


#: the identity every :class:`SimBucket` reports (the crash harness's one bucket)
SIM_IDENTITY = S3Identity("sim", "sim-bucket", "sim")


class BucketClient(Protocol):
    """The operations statecraft needs of one bucket."""

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        """Store ``data`` under ``key`` atomically; returns the new etag.

        Raises:
            PreconditionFailed: the condition did not hold; nothing changed.
            ObjectRequestError: the request failed or its outcome is unknown.
        """

    def get(self, key: str) -> bytes:
        """The object's bytes; ``FileNotFoundError`` when absent."""

    def head(self, key: str) -> ObjectInfo | None: ...

    def list(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``, sorted."""

    def delete(self, key: str) -> None: ...


class ArchiveBucket(BucketClient, Protocol):
    """A bucket the archive transactions (upload, publish, fetch, prune-verified, ``objects``)
    talk to: :class:`SimBucket` under the crash harness, :class:`~statecraft.storage.s3.S3Bucket`
    in production. Every object statecraft writes carries the sha256 of its bytes in its
    metadata, so a HEAD proves size and digest without reading the body.
    """

    def identity(self) -> S3Identity:
        """Endpoint authority, bucket and key id (never the secret): what markers bind."""

    def describe(self) -> str:
        """``s3://<bucket> at <endpoint>`` for messages."""

    def stat(self, key: str) -> RemoteObject | None:
        """Size, etag and stored sha256 of ``key``; ``None`` when absent.

        Raises:
            ObjectRequestError: the request failed after the bounded retries.
        """

    def upload_from(
        self,
        key: str,
        store: Store,
        path: str,
        *,
        sha256: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """Upload the file ``path`` of ``store`` to ``key`` (streamed, multipart when large);
        returns the etag. ``sha256`` (hex), when the caller hashed the file already, is what
        the metadata records; otherwise the upload computes it.

        Raises:
            FileNotFoundError: ``path`` is not in ``store``.
            PreconditionFailed: ``if_none_match`` and another object holds ``key``.
            ObjectRequestError: the request failed after the bounded retries (its outcome may be
                unknown: look before concluding).
        """

    def download_into(self, key: str, store: Store, path: str) -> RemoteObject:
        """Write the object's bytes to ``path`` of ``store`` atomically (a temporary, fsynced,
        renamed); returns what was fetched. The bytes are checked against the size and the
        stored sha256 (when there is one) before the file is placed.

        Raises:
            FileNotFoundError: no such key.
            ObjectRequestError: the request failed, the object changed mid-download, or the
                bytes did not match its size or stored sha256 (nothing placed).
        """


class SimBucket:
    """An in-memory bucket with S3's per-key semantics and conditional writes.

    Every mutating request passes the optional gate (a crash point). A bucket survives every
    crash kind: it is remote.
    """

    def __init__(self, *, gate: IoGate | None = None) -> None:
        self.gate = gate
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.sha256: dict[str, str] = {}
        self._version = 0

    def __repr__(self) -> str:
        return f"SimBucket(objects={len(self.objects)})"

    def _request(self, op: str, key: str) -> FaultKind | None:
        if self.gate is None:
            return None
        fault = self.gate.before_io(op, key)
        if fault is None:
            return None
        if fault.kind is FaultKind.LOST_RESPONSE:
            return fault.kind
        raise ObjectRequestError(f"injected {fault.kind.value} on {op} {key!r} (not applied)")

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        fault = self._request("put", key)
        current = self.objects.get(key)
        if if_none_match and current is not None:
            raise PreconditionFailed(f"If-None-Match: * refused: {key!r} exists")
        if if_match is not None and (current is None or current[1] != if_match):
            raise PreconditionFailed(f"If-Match: {if_match} refused for {key!r}")
        self._version += 1
        etag = f'"{hashlib.md5(data).hexdigest()}-{self._version}"'
        self.objects[key] = (bytes(data), etag)
        self.sha256[key] = hashlib.sha256(data).hexdigest()
        if fault is FaultKind.LOST_RESPONSE:
            raise ObjectRequestError(f"put {key!r}: response lost (the object WAS written)")
        return etag

    def get(self, key: str) -> bytes:
        if key not in self.objects:
            raise FileNotFoundError(f"no object {key!r}")
        return self.objects[key][0]

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of the object from ``start`` (fewer at its end), like a ranged GET.

        Raises:
            ValueError: a negative ``start`` or ``length``.
            FileNotFoundError: no such key.
        """
        if start < 0 or length < 0:
            raise ValueError(f"get_range({key!r}, {start}, {length}): offsets must be >= 0")
        return self.get(key)[start : start + length]

    def head(self, key: str) -> ObjectInfo | None:
        entry = self.objects.get(key)
        return None if entry is None else ObjectInfo(len(entry[0]), entry[1])

    def list(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        fault = self._request("delete", key)
        self.objects.pop(key, None)
        self.sha256.pop(key, None)
        if fault is FaultKind.LOST_RESPONSE:
            raise ObjectRequestError(f"delete {key!r}: response lost (the object WAS deleted)")

    def copy(self) -> SimBucket:
        """The bucket as it stands, detached from any gate (what survives a crash)."""
        clone = SimBucket()
        clone.objects = dict(self.objects)
        clone.sha256 = dict(self.sha256)
        clone._version = self._version
        return clone

    # -- the ArchiveBucket operations ----------------------------------------------------------

    def identity(self) -> S3Identity:
        return SIM_IDENTITY

    def describe(self) -> str:
        return "s3://sim-bucket at sim"

    def stat(self, key: str) -> RemoteObject | None:
        entry = self.objects.get(key)
        if entry is None:
            return None
        return RemoteObject(len(entry[0]), entry[1], self.sha256.get(key, ""))

    def upload_from(
        self,
        key: str,
        store: Store,
        path: str,
        *,
        sha256: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        data = store.read_bytes(path)
        return self.put(key, data, if_none_match=if_none_match)

    def download_into(self, key: str, store: Store, path: str) -> RemoteObject:
        there = self.stat(key)
        if there is None:
            raise FileNotFoundError(f"no object {key!r}")
        data = self.get(key)
        if there.sha256 and hashlib.sha256(data).hexdigest() != there.sha256:
            raise ObjectRequestError(f"get {key!r}: the bytes do not match the stored sha256")
        store.write_atomic(path, data)
        return there

    def tamper(self, key: str, data: bytes) -> None:
        """Replace ``key``'s bytes the way a foreign writer would (no sha256 metadata): what
        the harness uses for "a remote object was altered"."""
        self._version += 1
        self.objects[key] = (bytes(data), f'"{hashlib.md5(data).hexdigest()}-{self._version}"')
        self.sha256.pop(key, None)


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

    def __exit__(self, exc_type, exc, tb) -> None:
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
