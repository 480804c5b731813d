"""Which crash states the explorer checks, and when two of them are the same state.

Two crash states of one crash point (one crashed run) are *the same* when everything a
guarantee check or a recovery can look at is equal: the crash kind and the world a restarted
process finds (every inode with its visible, durable and pending bytes and entries, every object
of the bucket); the crashed run (its operations, its acknowledgement, what it left in the
scenario for the checks) is common to them. Checks and recoveries are deterministic, so the
verdict of the first such state is the verdict of every later one: :func:`state_key` lets the
explorer check it once (``distinct_crash_states`` in the reports) and still report every state,
relabelled. The duplicates are the power-loss choices that leave the same disk (all unsynced
operations lost when none of them is durable-relevant, a lost write a later one overwrote...).

A recovery reads only the world (a restarted process has nothing else; Scenario's contract),
so every state of a scenario that finds the same world (:func:`world_key`), at whatever point,
shares one recovery, whose outcome each of them checks: the crash points of one effect boundary
(``after effect #k``, ``before effect #k+1``, ``io#i`` before that effect's first operation)
and most power-loss states before the first fsync are the same world.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator

from statecraft.engine.crash import IoRecord
from statecraft.storage.sim import CrashKind, SimWorld
from statecraft.storage.simfs import LossChoice

__all__ = ["EXHAUSTIVE_SUBSETS_UP_TO", "loss_choices", "state_key", "world_key"]

#: ``--exhaustive`` tries every subset of the unsynced operations when there are at most this
#: many (2**12 states per power-loss point); beyond, that many random subsets.
EXHAUSTIVE_SUBSETS_UP_TO = 12


def _feed(h: hashlib.blake2b, *parts: object) -> None:
    for part in parts:
        raw = part if isinstance(part, bytes | bytearray) else repr(part).encode()
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)


def world_key(world: SimWorld) -> bytes:
    """A digest of everything a recovery can read: the world a restarted process finds."""
    h = hashlib.blake2b(digest_size=20)
    fs = world.fs
    _feed(h, fs.capacity_bytes, fs._next_ino, fs._next_op)
    for ino in sorted(fs._inodes):
        node = fs._inodes[ino]
        _feed(h, ino, node.is_dir, node.data, node.synced)
        for w in node.pending:
            _feed(h, w.op_id, w.offset, w.truncate, w.data)
        _feed(h, sorted(node.entries.items()), sorted(node.synced_entries.items()))
        _feed(h, [(e.op_id, e.add, e.name, e.ino) for e in node.pending_entries])
    bucket = world.bucket
    _feed(h, "bucket", bucket._version, sorted(bucket.sha256.items()))
    for key in sorted(bucket.objects):
        data, etag = bucket.objects[key]
        _feed(h, key, etag, data)
    return h.digest()


def state_key(
    kind: CrashKind,
    world_digest: bytes,
    *,
    acknowledged: bool,
    io_log: tuple[IoRecord, ...],
    fault: bool,
) -> bytes:
    """A digest of everything a check of this crash state can read: the world (its
    :func:`world_key`), the crash kind, the acknowledgement, the crashed run's operations and
    whether a fault was injected."""
    h = hashlib.blake2b(digest_size=20)
    _feed(h, world_digest, kind.value, acknowledged, fault)
    _feed(h, tuple((r.index, r.op, r.target) for r in io_log))
    return h.digest()


def loss_choices(
    world: SimWorld, kind: CrashKind, extra: int, rng: random.Random, *, exhaustive: bool
) -> Iterator[LossChoice | None]:
    """The loss choices of one crash kind at one point: ``None`` for a process kill or a node
    loss; for a power loss the systematic choices (DESIGN.md §4(b)), then ``extra`` random
    subsets of the unsynced operations, or with ``exhaustive`` every subset (a random
    ``2**EXHAUSTIVE_SUBSETS_UP_TO`` of them beyond that many operations)."""
    if kind is not CrashKind.POWER_LOSS:
        yield None
        return
    systematic = world.fs.loss_choices()
    yield from systematic
    ids = sorted({op.op_id for op in world.fs.pending_ops()})
    seen = {c.kept for c in systematic if c.torn is None}
    if exhaustive and len(ids) <= EXHAUSTIVE_SUBSETS_UP_TO:
        subsets: Iterator[frozenset[int]] = (
            frozenset(c) for n in range(len(ids) + 1) for c in itertools.combinations(ids, n)
        )
    else:
        tries = 2**EXHAUSTIVE_SUBSETS_UP_TO if exhaustive else (extra if len(ids) > 2 else 0)
        subsets = (frozenset(i for i in ids if rng.random() < 0.5) for _ in range(tries))
    for kept in subsets:
        if kept not in seen:
            seen.add(kept)
            yield LossChoice("subset{" + ",".join(map(str, sorted(kept))) + "}", kept)
