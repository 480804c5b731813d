"""``<RUN_TS>/DONE.json``: the record of how a window of an attempt ended.

Written by rank 0, atomically and durably (:meth:`Store.write_atomic`: a temporary, its fsync,
the rename, the directory fsync), only after the checkpoint it names is durable: at a stop
(``preempted`` = the reason, by the emergency transaction's ``write_done`` effect) and at a
normal ``finalize()`` (``preempted = null``). Every window that ends replaces it; the next
window's ``resume()`` reads it (:func:`read_done`) and logs one line. It never decides what
resume adopts.

::

    record = done_record(step=120, preempted="signal SIGTERM",
                         checkpoint="checkpoints/iter_000000120", saved=True,
                         seconds_to_durable=0.42)
    write_done(attempt, filesystem, record)       # <run_dir>/DONE.json, durable
    read_done(attempt, filesystem)                # the same record, or None when absent

The schema (``statecraft.done.v1``, ``specs/done.schema.json``) is strict: an unknown key, a
missing one, a wrong type or another schema name is a :class:`CheckpointCorruptError` naming
the file, never a guess.
"""

from __future__ import annotations

import os
import socket
import time

from statecraft.checkpoint.kernel.layout import RunAttempt
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.checkpoint.stop.records import DONE_FILE, DONE_SCHEMA, DoneRecord
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = [
    "DONE_SCHEMA_FILE",
    "done_record",
    "done_where",
    "encode_done",
    "read_done",
    "write_done",
]

#: the JSON schema of the record beside the specs
DONE_SCHEMA_FILE = "done.schema.json"

_CODEC = record_codec(
    DoneRecord,
    schema=DONE_SCHEMA,
    fix=(
        "It only records how the previous window ended (resume never relies on it): move it "
        "aside, or delete it; the next window that ends writes a new one"
    ),
    schema_file=DONE_SCHEMA_FILE,
    not_json="is not JSON",
    wrong_schema="is not a {expected} record (schema {found!r})",
)


def done_record(
    *,
    step: int,
    preempted: str | None,
    checkpoint: str | None,
    saved: bool,
    seconds_to_durable: float | None,
) -> DoneRecord:
    """A :class:`DoneRecord` of this process now (schema, ``time.time()``, host name, pid
    filled in)."""
    return DoneRecord(
        schema=DONE_SCHEMA,
        step=step,
        preempted=preempted,
        checkpoint=checkpoint,
        saved=saved,
        seconds_to_durable=seconds_to_durable,
        finished_at=time.time(),
        host=socket.gethostname(),
        pid=os.getpid(),
    )


def encode_done(record: DoneRecord) -> bytes:
    """The bytes of ``DONE.json`` (sorted keys, one key a line, trailing newline), checked
    against ``specs/done.schema.json``.

    Raises:
        CheckpointError: the record breaks the schema (an unknown reason, a negative step...);
            nothing is written.
    """
    return _CODEC.encode(record, what=DONE_FILE)


def _store(attempt: RunAttempt, filesystem: Filesystem | None) -> Store:
    return LocalStore(str(attempt.run_dir.absolute()), fs=filesystem or OsFilesystem())


def done_where(attempt: RunAttempt) -> str:
    """The OS path of the attempt's ``DONE.json`` (for messages)."""
    return str(attempt.run_dir.absolute() / DONE_FILE)


def write_done(attempt: RunAttempt, filesystem: Filesystem | None, record: DoneRecord) -> None:
    """Replace ``<run_dir>/DONE.json`` with ``record``, atomically and durably (rank 0 only;
    the caller made the named checkpoint durable first).

    Raises:
        StoreError / OSError: the record is not durable; the previous ``DONE.json`` (if any)
            is still in place.
    """
    _store(attempt, filesystem).write_atomic(DONE_FILE, encode_done(record))


def read_done(attempt: RunAttempt, filesystem: Filesystem | None) -> DoneRecord | None:
    """The attempt's ``DONE.json``, or ``None`` when there is none. Reads only (never creates
    the run directory).

    Raises:
        CheckpointCorruptError: the file is not JSON, not a ``statecraft.done.v1`` record, or
            has an unknown, missing or mistyped field; the message names the file and the fix.
    """
    fs = filesystem or OsFilesystem()
    where = done_where(attempt)
    stat = fs.stat(str(attempt.run_dir.absolute()))
    if stat is None or not stat.is_dir:
        return None
    store = _store(attempt, fs)
    try:
        data = store.read_bytes(DONE_FILE)
    except FileNotFoundError:
        return None
    return _CODEC.decode(data, source=where)
