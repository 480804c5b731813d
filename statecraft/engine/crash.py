"""Crash and fault injection points shared by the runner and the stores.

Production passes no gate. The crash harness gives the runner and the stores one
:class:`IoGate`; every store I/O operation calls :meth:`IoGate.before_io` first, which counts
it, logs it and, at the armed index, raises :class:`SimulatedCrash` (the process "dies" before
the operation) or hands back a :class:`Fault` for the store to apply (an I/O error, a full
disk, an object-store request that succeeded but whose response was lost).
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["CrashPlan", "Fault", "FaultKind", "IoGate", "IoRecord", "SimulatedCrash"]


class SimulatedCrash(BaseException):
    """The simulated process died here.

    Derives from ``BaseException`` so that no ``except Exception`` in production code can
    swallow it: nothing after the crash point runs, as with SIGKILL or power loss.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"simulated crash {where}")


class FaultKind(enum.Enum):
    """What an injected fault does to the operation it hits."""

    IO_ERROR = "io_error"  # the op fails with EIO; an fsync failure loses the unsynced data
    NO_SPACE = "no_space"  # the op fails with ENOSPC (a write on a full disk)
    LOST_RESPONSE = (
        "lost_response"  # object store: the request took effect, the client sees an error
    )


@attrs.frozen
class Fault:
    kind: FaultKind
    index: int


@attrs.frozen
class IoRecord:
    """One store operation as seen by the gate."""

    index: int
    op: str
    target: str


@attrs.frozen
class CrashPlan:
    """Where the runner crashes a run. Exactly one field is set.

    Attributes:
        before_effect: crash just before the k-th effect of the run (0-based) starts.
        after_effect: crash just after the k-th effect returns.
        at_io: crash just before the k-th store I/O operation of the run (0-based); this is
            how crashes *inside* an effect are placed.
    """

    before_effect: int | None = None
    after_effect: int | None = None
    at_io: int | None = None

    def __attrs_post_init__(self) -> None:
        chosen = [v for v in (self.before_effect, self.after_effect, self.at_io) if v is not None]
        if len(chosen) != 1 or chosen[0] < 0:
            raise ValueError(
                f"CrashPlan needs exactly one non-negative index, got {self!r}; set one of "
                "before_effect, after_effect, at_io"
            )

    def describe(self) -> str:
        if self.before_effect is not None:
            return f"before effect #{self.before_effect}"
        if self.after_effect is not None:
            return f"after effect #{self.after_effect}"
        return f"before I/O op #{self.at_io}"


class IoGate:
    """Counts, logs and interrupts the store operations of one run.

    Args:
        crash_at: raise :class:`SimulatedCrash` before the operation with this index.
        faults: operation index -> fault kind to inject into that operation.
    """

    def __init__(
        self, *, crash_at: int | None = None, faults: dict[int, FaultKind] | None = None
    ) -> None:
        self.crash_at = crash_at
        self.faults = dict(faults or {})
        self.count = 0
        self.log: list[IoRecord] = []

    def before_io(self, op: str, target: str) -> Fault | None:
        """Called by a store before each operation; returns a fault to apply, if any.

        Raises:
            SimulatedCrash: when this operation's index is the armed crash point.
        """
        index = self.count
        if self.crash_at is not None and index == self.crash_at:
            raise SimulatedCrash(f"before I/O op #{index} ({op} {target})")
        self.count += 1
        self.log.append(IoRecord(index, op, target))
        kind = self.faults.get(index)
        return Fault(kind, index) if kind is not None else None

    def __repr__(self) -> str:
        return f"IoGate(count={self.count}, crash_at={self.crash_at}, faults={self.faults})"
