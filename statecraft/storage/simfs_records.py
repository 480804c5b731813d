"""The records a :class:`~statecraft.storage.simfs.SimFilesystem` keeps: inodes with their
durable and pending data and entries, the operations not yet durable, and the loss choices a
power loss is enumerated by (DESIGN.md §4)."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

__all__ = [
    "ROOT",
    "EntryOp",
    "Inode",
    "LossChoice",
    "PendingOp",
    "Write",
    "apply_writes",
    "split_path",
]

ROOT = 0


@attrs.define
class Write:
    """One accepted write (or truncate) to a file, not yet known durable."""

    op_id: int
    offset: int
    data: bytes
    truncate: bool = False  # a truncate-to-zero (open without O_EXCL over an existing file)


@attrs.define
class EntryOp:
    """One accepted directory-entry change, not yet known durable."""

    op_id: int
    add: bool  # True: name -> ino; False: remove name (if it still maps to ino)
    name: str
    ino: int


@attrs.define
class Inode:
    """A file or directory: what a process sees, what is durable, and what is pending."""

    ino: int
    is_dir: bool
    data: bytearray = attrs.field(factory=bytearray)
    synced: bytes = b""
    pending: list[Write] = attrs.field(factory=list)
    entries: dict[str, int] = attrs.field(factory=dict)
    synced_entries: dict[str, int] = attrs.field(factory=dict)
    pending_entries: list[EntryOp] = attrs.field(factory=list)


@attrs.frozen
class PendingOp:
    """An operation the OS accepted but that is not yet durable."""

    op_id: int
    kind: str  # "write" or "entry"
    description: str


@attrs.frozen
class LossChoice:
    """Which unsynced operations a power loss keeps.

    Attributes:
        name: a short label used in reports (``all_lost``, ``omit#7``, ``torn_zeros#9``...).
        kept: ids of the unsynced operations that survive; all others are lost.
        torn: ``(op_id, mode)``: that write survives torn: ``"prefix"`` keeps the first half of
            its bytes, ``"zeros"`` keeps its length but zero-fills it.
    """

    name: str
    kept: frozenset[int]
    torn: tuple[int, str] | None = None


def split_path(path: str) -> list[str]:
    """The components of an absolute POSIX path."""
    if not path.startswith("/"):
        raise ValueError(f"SimFilesystem paths are absolute POSIX paths, got {path!r}")
    return [p for p in path.split("/") if p]


def apply_writes(base: bytes, writes: Iterable[Write], torn: tuple[int, str] | None) -> bytes:
    """``base`` with ``writes`` applied in order, the write ``torn`` names torn."""
    data = bytearray(base)
    for w in writes:
        payload = w.data
        if torn is not None and torn[0] == w.op_id:
            payload = payload[: len(payload) // 2] if torn[1] == "prefix" else bytes(len(payload))
        if w.truncate:
            del data[:]
            continue
        end = w.offset + len(payload)
        if w.offset > len(data):
            data.extend(bytes(w.offset - len(data)))
        data[w.offset : end] = payload
    return bytes(data)
