"""The record of the object-store writer lease ``<root>/.statecraft-lease.json``
(:class:`ObjectLeaseRecord`, schema ``statecraft.object-lease.v1``, JSON schema
``specs/object-lease.schema.json``): who may commit under a direct object-store checkpoints
root, since when and until when. How it is taken, renewed and checked is
:mod:`statecraft.checkpoint.fencing.object_lease`.

Times are ISO 8601 UTC strings to the microsecond (``2026-12-02T05:00:00.000000+00:00``),
converted from and to unix seconds by :func:`iso_utc` / :func:`parse_iso_utc`.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import attrs

from statecraft.checkpoint.kernel.manifest import strict_converter
from statecraft.checkpoint.kernel.schemas import encode_conforming, json_text_violations
from statecraft.errors import WriterLeaseError

__all__ = [
    "OBJECT_LEASE_NAME",
    "OBJECT_LEASE_SCHEMA",
    "OBJECT_LEASE_SCHEMA_FILE",
    "ObjectLeaseRecord",
    "decode_object_lease",
    "iso_utc",
    "parse_iso_utc",
]

#: the lease object's name under the checkpoints root
OBJECT_LEASE_NAME = ".statecraft-lease.json"
OBJECT_LEASE_SCHEMA = "statecraft.object-lease.v1"
OBJECT_LEASE_SCHEMA_FILE = "object-lease.schema.json"
_MAX_LEASE_BYTES = 64 << 10

_converter = strict_converter()


def iso_utc(seconds: float) -> str:
    """Unix ``seconds`` as ISO 8601 UTC with microseconds (``...T05:00:00.000000+00:00``)."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="microseconds")


def parse_iso_utc(text: str) -> float:
    """The unix seconds of an ISO 8601 date-time with a UTC offset.

    Raises:
        ValueError: not such a date-time (a naive one included).
    """
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset")
    return when.timestamp()


@attrs.frozen
class ObjectLeaseRecord:
    """One version of the lease object.

    Attributes:
        owner: unique per acquisition (``<host>:<pid>:<hex>``).
        host, pid: the owning process.
        generation: 1 at the root's first acquisition, +1 at each takeover.
        acquired, renewed, expires: ISO 8601 UTC; ``expires`` is ``renewed + ttl_s``.
        ttl_s: the owner's ``checkpoint_store.lease_ttl_s``.
        released: the owner gave it up cleanly (the next writer takes it at once).
    """

    schema: str
    owner: str
    host: str
    pid: int
    generation: int
    acquired: str
    renewed: str
    expires: str
    ttl_s: float
    released: bool = False

    @property
    def expires_at(self) -> float:
        """``expires`` as unix seconds."""
        return parse_iso_utc(self.expires)

    def expired(self, now: float) -> bool:
        """The lease no longer protects its owner at unix time ``now`` (expired or released)."""
        return self.released or now >= self.expires_at

    def encode(self) -> bytes:
        """The object's bytes, checked against ``specs/object-lease.schema.json``.

        Raises:
            CheckpointError: the record breaks the schema (a bug); nothing is written.
        """
        return encode_conforming(
            _converter.unstructure(self), OBJECT_LEASE_SCHEMA_FILE, what=OBJECT_LEASE_NAME
        )

    def describe(self) -> str:
        state = "released" if self.released else f"expires {self.expires}"
        return (
            f"owner {self.owner} (host {self.host}, PID {self.pid}, generation "
            f"{self.generation}, since {self.acquired}, {state})"
        )

    def report(self, etag: str, now: float) -> dict[str, Any]:
        """What ``inspect`` and ``statecraft lease`` print of this record at unix time
        ``now``: its status (``live`` / ``expired`` / ``released``), owner facts and ``etag``."""
        status = "released" if self.released else ("expired" if self.expired(now) else "live")
        return {
            "status": status,
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "generation": self.generation,
            "acquired": self.acquired,
            "renewed": self.renewed,
            "expires": self.expires,
            "ttl_s": self.ttl_s,
            "etag": etag,
        }

    def fields(self) -> dict[str, Any]:
        """The facts a :class:`~statecraft.errors.WriterLeaseError` carries."""
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "generation": self.generation,
            "since": self.acquired,
            "expires": self.expires,
        }


def decode_object_lease(data: bytes, where: str) -> ObjectLeaseRecord:
    """Parse the lease object's bytes (``where`` names it in messages).

    Raises:
        WriterLeaseError: too large, not JSON, another schema, or anything
            ``specs/object-lease.schema.json`` refuses (unknown, missing or mistyped fields);
            the fix says how to clear it deliberately.
    """
    fix = (
        "It is not a lease statecraft wrote: make sure no job writes under this root, then "
        "take the root over deliberately (statecraft lease takeover <root>)"
    )
    if len(data) > _MAX_LEASE_BYTES:
        raise WriterLeaseError(
            f"{where}: the lease object is over {_MAX_LEASE_BYTES} bytes. {fix}", path=where
        )
    try:
        raw = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise WriterLeaseError(
            f"{where}: the lease object is not JSON ({exc}). {fix}", path=where
        ) from None
    schema = raw.get("schema") if isinstance(raw, dict) else None
    if schema != OBJECT_LEASE_SCHEMA:
        raise WriterLeaseError(
            f"{where}: lease schema {schema!r}, expected {OBJECT_LEASE_SCHEMA!r}. {fix}",
            path=where,
        )
    violations = json_text_violations(OBJECT_LEASE_SCHEMA_FILE, bytes(data))
    if violations:
        raise WriterLeaseError(
            f"{where}: the lease object violates specs/{OBJECT_LEASE_SCHEMA_FILE}: "
            f"{'; '.join(violations)}. {fix}",
            path=where,
        )
    try:
        record = _converter.structure(raw, ObjectLeaseRecord)
        record.expires_at  # noqa: B018 - the date must parse
        parse_iso_utc(record.acquired)
        parse_iso_utc(record.renewed)
    except Exception as exc:
        raise WriterLeaseError(
            f"{where}: the lease object does not parse ({type(exc).__name__}: {exc}). {fix}",
            path=where,
        ) from None
    return record
