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
from typing import Any

import attrs

from statecraft.checkpoint.fencing.lease_record import lease_error
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.errors import CheckpointError

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
        job: the owner's scheduler job (``slurm:<SLURM_JOB_ID>``), ``None`` outside one.
        restart_count: that job's ``SLURM_RESTART_COUNT`` (with ``job``).
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
    job: str | None = None
    restart_count: int | None = None

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
        problems = _date_problems(self)
        if problems:
            raise CheckpointError(f"refusing to write {OBJECT_LEASE_NAME}: " + "; ".join(problems))
        document = _CODEC.converter.unstructure(self)
        for name in ("job", "restart_count"):  # absent outside a scheduler: the old bytes
            if document.get(name) is None:
                document.pop(name, None)
        return _CODEC.encode_document(document, what=OBJECT_LEASE_NAME)

    def describe(self) -> str:
        state = "released" if self.released else f"expires {self.expires}"
        job = f"job {self.job} restart {self.restart_count}, " if self.job else ""
        return (
            f"owner {self.owner} (host {self.host}, PID {self.pid}, {job}generation "
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
            "job": self.job,
            "restart_count": self.restart_count,
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


def _date_problems(record: ObjectLeaseRecord) -> list[str]:
    """Its times that are not ISO 8601 date-times with a UTC offset."""
    problems = []
    for name in ("acquired", "renewed", "expires"):
        try:
            parse_iso_utc(getattr(record, name))
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    return problems


_CODEC = record_codec(
    ObjectLeaseRecord,
    schema=OBJECT_LEASE_SCHEMA,
    what="the lease object",
    fix=(
        "It is not a lease statecraft wrote: make sure no job writes under this root, then "
        "take the root over deliberately (statecraft lease takeover <root>)"
    ),
    schema_file=OBJECT_LEASE_SCHEMA_FILE,
    max_bytes=_MAX_LEASE_BYTES,
    not_json="is not JSON",
    error=lease_error,
    problems=_date_problems,
)


def decode_object_lease(data: bytes, where: str) -> ObjectLeaseRecord:
    """Parse the lease object's bytes (``where`` names it in messages).

    Raises:
        WriterLeaseError: too large, not JSON, another schema, anything
            ``specs/object-lease.schema.json`` refuses (unknown, missing or mistyped fields),
            or a time that is not ISO 8601 UTC; the fix says how to clear it deliberately.
    """
    return _CODEC.decode(data, source=where)
