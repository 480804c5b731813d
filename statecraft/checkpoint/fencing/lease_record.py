"""The writer lease's record ``<run>/.statecraft-writer.lease``: who owns an attempt
(:class:`LeaseRecord`, schema ``statecraft.writer-lease.v1``), how it is read
(:func:`read_lease`) and whether its owner still lives (:func:`pid_alive`). The lease itself
(the lock, acquisition, takeover, the check at every publication) is
:mod:`statecraft.checkpoint.fencing.lease`.
"""

from __future__ import annotations

import json
import os
import socket

import attrs
import cattrs

from statecraft.errors import WriterLeaseError
from statecraft.storage.base import Store

__all__ = ["LEASE_NAME", "LEASE_SCHEMA", "LeaseRecord", "pid_alive", "read_lease"]

LEASE_NAME = ".statecraft-writer.lease"
LEASE_SCHEMA = "statecraft.writer-lease.v1"
_MAX_LEASE_BYTES = 64 << 10

_converter = cattrs.Converter(forbid_extra_keys=True)


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
        return (json.dumps(_converter.unstructure(self), sort_keys=True, indent=2) + "\n").encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> LeaseRecord:
        """Parse a lease file.

        Raises:
            WriterLeaseError: not JSON, another schema, or fields missing / of the wrong type.
        """
        try:
            raw = json.loads(data.decode("utf-8"))
            record = _converter.structure(raw, cls)
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
            raise WriterLeaseError(
                f"{where}: the writer lease does not parse ({type(exc).__name__}: {exc}); "
                "expected a statecraft.writer-lease.v1 record. Remove it only if no other "
                "process writes this attempt",
                path=where,
            ) from None
        if record.schema != LEASE_SCHEMA:
            raise WriterLeaseError(
                f"{where}: writer lease schema {record.schema!r}, expected {LEASE_SCHEMA!r}",
                path=where,
            )
        return record

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
