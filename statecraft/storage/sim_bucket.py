"""``SimBucket``: an in-memory bucket with S3's per-key semantics, for the crash harness.

Every mutating request passes an optional :class:`~statecraft.engine.crash.IoGate` (a crash
point). The harness covers both outcomes of a request in flight at a crash (crash before the
request = not applied; crash before the next request = applied) and injects the third case,
"applied but the client saw an error", as a ``LOST_RESPONSE`` fault.
"""

from __future__ import annotations

import hashlib

from statecraft.engine.crash import FaultKind, IoGate
from statecraft.errors import ObjectRequestError, PreconditionFailed
from statecraft.storage.base import Store
from statecraft.storage.bucket import ObjectInfo, RemoteObject
from statecraft.storage.s3_credentials import S3Identity

__all__ = ["SIM_IDENTITY", "SimBucket"]

#: the identity every :class:`SimBucket` reports (the crash harness's one bucket)
SIM_IDENTITY = S3Identity("sim", "sim-bucket", "sim")


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
