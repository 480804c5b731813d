"""The writer lease's record ``<run>/.statecraft-writer.lease``: who owns an attempt
(:class:`LeaseRecord`, schema ``statecraft.writer-lease.v1``), how it is read
(:func:`read_lease`) and whether its owner still lives (:func:`pid_alive`). The lease itself
(the lock, acquisition, takeover, the check at every publication) is
:mod:`statecraft.checkpoint.fencing.lease`.
"""

from __future__ import annotations

import os
import socket

import attrs
import cattrs

from statecraft.checkpoint.kernel.records import record_codec
from statecraft.errors import WriterLeaseError
from statecraft.storage.base import Store

__all__ = ["LEASE_NAME", "LEASE_SCHEMA", "LeaseRecord", "lease_error", "pid_alive", "read_lease"]

LEASE_NAME = ".statecraft-writer.lease"
LEASE_SCHEMA = "statecraft.writer-lease.v1"
_MAX_LEASE_BYTES = 64 << 10


def lease_error(where: str, problem: str, fix: str) -> WriterLeaseError:
    """The :class:`WriterLeaseError` of a lease record that does not decode."""
    return WriterLeaseError(f"{where}: {problem}. {fix}", path=where)


@attrs.frozen
class LeaseRecord:
    """Who owns the attempt: ``owner`` (unique per acquisition), ``host``, ``pid``,
    ``generation`` (1 at first, +1 at each takeover), ``created`` (ISO 8601, UTC)."""

    schema: str
    owner: str
    host: str
    pid: int
    generation: int
    created: str

    def encode(self) -> bytes:
        return _CODEC.encode(self, what=LEASE_NAME)

    @classmethod
    def decode(cls, data: bytes, where: str) -> LeaseRecord:
        """Parse a lease file.

        Raises:
            WriterLeaseError: not JSON, another schema, or fields missing / of the wrong type.
        """
        return _CODEC.decode(data, source=where)

    def describe(self) -> str:
        return (
            f"owner {self.owner} (host {self.host}, PID {self.pid}, generation "
            f"{self.generation}, since {self.created})"
        )

    def fields(self) -> dict[str, object]:
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "generation": self.generation,
            "since": self.created,
        }


_CODEC = record_codec(
    LeaseRecord,
    schema=LEASE_SCHEMA,
    what="the writer lease",
    fix="Remove it only if no other process writes this attempt",
    indent=2,
    error=lease_error,
    converter=cattrs.Converter(forbid_extra_keys=True),  # its ints and strs as it always read
)


def pid_alive(record: LeaseRecord) -> bool:
    """True when ``record``'s PID runs on this host (another host's owner counts as alive:
    we cannot tell, so we fail closed)."""
    if record.host != socket.gethostname():
        return True
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_lease(store: Store) -> LeaseRecord | None:
    """The attempt's lease record in ``store`` (its run dir); ``None`` when there is none.

    Raises:
        WriterLeaseError: the record is a directory, too large, or does not parse.
    """
    where = f"{store.describe()}/{LEASE_NAME}"
    stat = store.stat(LEASE_NAME)
    if stat is None:
        return None
    if stat.is_dir or stat.size > _MAX_LEASE_BYTES:
        raise WriterLeaseError(
            f"{where} is a directory or over {_MAX_LEASE_BYTES} bytes; expected a small "
            "statecraft.writer-lease.v1 record. Move it aside",
            path=where,
        )
    try:
        data = store.read_bytes(LEASE_NAME)
    except FileNotFoundError:
        return None
    return LeaseRecord.decode(data, where)
