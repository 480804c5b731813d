"""The simulated world the crash harness runs production code in: one node's local disk
(:class:`~statecraft.storage.simfs.SimFilesystem`) plus a remote bucket
(:class:`~statecraft.storage.objects.SimBucket`), sharing one I/O gate.

:meth:`SimWorld.after_crash` applies one of the three crash kinds of DESIGN.md §4:

- ``process_kill``: the disk keeps everything the OS accepted;
- ``power_loss``: the disk keeps what was fsynced plus the unsynced operations a
  :class:`~statecraft.storage.simfs.LossChoice` keeps;
- ``node_loss``: the disk is blank.

The bucket is unaffected by every kind (it is remote); requests that completed before the
crash are there, the one in flight is not (the harness also crashes just after it).
"""

from __future__ import annotations

import enum

from statecraft.engine.crash import IoGate
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ObjectStore, SimBucket
from statecraft.storage.simfs import LossChoice, SimFilesystem

__all__ = ["CrashKind", "SimWorld"]


class CrashKind(enum.Enum):
    PROCESS_KILL = "process_kill"
    POWER_LOSS = "power_loss"
    NODE_LOSS = "node_loss"


class SimWorld:
    """A simulated disk and bucket that share one gate.

    Args:
        capacity_bytes: size of the simulated disk (``ENOSPC`` beyond it).
    """

    def __init__(self, *, capacity_bytes: int | None = None) -> None:
        self.gate = IoGate()
        self.fs = SimFilesystem(gate=self.gate, capacity_bytes=capacity_bytes)
        self.bucket = SimBucket(gate=self.gate)

    def __repr__(self) -> str:
        return f"SimWorld({self.fs!r}, {self.bucket!r})"

    def local_store(self, root: str) -> LocalStore:
        """The production ``LocalStore`` over this world's disk."""
        return LocalStore(root, fs=self.fs)

    def object_store(self, prefix: str = "") -> ObjectStore:
        """The production ``ObjectStore`` over this world's bucket."""
        return ObjectStore(self.bucket, prefix=prefix, name="sim-bucket")

    def rearm(self, gate: IoGate) -> None:
        """Route this world's I/O through ``gate`` (a fresh count for the next run)."""
        self.gate = gate
        self.fs.gate = gate
        self.bucket.gate = gate

    def settle(self) -> None:
        """Make everything durable and reset the gate (the state a scenario starts from)."""
        self.fs.sync_all()
        self.rearm(IoGate())

    def after_crash(self, kind: CrashKind, choice: LossChoice | None = None) -> SimWorld:
        """The world a restarted process finds after a crash of ``kind``."""
        world = SimWorld.__new__(SimWorld)
        world.gate = IoGate()
        if kind is CrashKind.PROCESS_KILL:
            world.fs = self.fs.after_process_kill()
        elif kind is CrashKind.POWER_LOSS:
            if choice is None:
                raise ValueError(
                    "a power loss needs a LossChoice saying which unsynced ops survive"
                )
            world.fs = self.fs.after_power_loss(choice)
        else:
            world.fs = self.fs.after_node_loss()
        world.fs.gate = world.gate
        world.bucket = self.bucket.copy()
        world.bucket.gate = world.gate
        return world

    def copy(self) -> SimWorld:
        """An independent copy of the current state (everything accepted so far)."""
        return self.after_crash(CrashKind.PROCESS_KILL)
