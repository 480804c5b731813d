"""The facade's background writes: one
:class:`~statecraft.checkpoint.async_writes.write_slot.WriteSlot`
and one set of reused :class:`~statecraft.checkpoint.async_writes.staging.StagingBuffers` per
trainer role,
and the collective join.

::

    writes = BackgroundWrites(collective, enabled=config.save_async)
    writes.join(saves)                 # every rank: rank 0 joins every role's slot
    staging, slot = writes.for_save()  # rank 0: the trainer role's buffers and slot

Joins are collective: every rank calls :meth:`BackgroundWrites.join` at the same point; rank 0
joins the slots and its outcome (the joined saves' reports, or the background error) reaches
every rank through :func:`~statecraft.parallel.rank0.on_rank_zero`, so a failed background
write raises on every rank. A joined save's :class:`~statecraft.checkpoint.save.saving.SaveReport`
is appended to ``saves`` (the facade's ``Checkpointer.saves``) on rank 0.

The facade joins before every write that is not a full asynchronous save (a partial artifact,
a durable validation, an evaluation), before the next asynchronous save (the staging buffers
are reused: the next copy only happens once the previous write finished), in ``finalize()``
after the final save, in ``wait()`` and in ``close()``.
"""

from __future__ import annotations

import logging
from typing import Any

from statecraft.checkpoint.async_writes.staging import StagingBuffers
from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot, WriteSlots
from statecraft.parallel.collectives import Collective
from statecraft.parallel.rank0 import on_rank_zero

__all__ = ["TRAINER_ROLE", "BackgroundWrites"]

log = logging.getLogger("statecraft")

#: the one trainer role of this release
TRAINER_ROLE = "trainer"


class BackgroundWrites:
    """Every role's background slot and staging buffers for one ``Checkpointer``.

    Args:
        collective: the ranks (joins are collective).
        enabled: ``save_async``; ``False``: :meth:`for_save` never offers a slot.
    """

    def __init__(self, collective: Collective, *, enabled: bool) -> None:
        self.collective = collective
        self.enabled = enabled
        self.slots = WriteSlots()
        self.staging: dict[str, StagingBuffers] = {}
        self.mirrors: list[PendingSave] = []  # other ranks: rank 0's in-flight saves

    def __repr__(self) -> str:
        return f"BackgroundWrites(enabled={self.enabled}, in_flight={self.in_flight()})"

    def in_flight(self) -> list[PendingSave]:
        """The saves still in flight on this rank (rank 0 only writes)."""
        out = []
        for role in self.staging:
            pending = self.slots.slot(role).in_flight
            if pending is not None:
                out.append(pending)
        return out

    def for_save(self, role: str = TRAINER_ROLE) -> tuple[StagingBuffers | None, WriteSlot | None]:
        """``role``'s reused staging buffers and its (joined) slot, or ``(None, None)`` when
        asynchronous saves are off (``save_async=false``)."""
        if not self.enabled:
            return None, None
        if role not in self.staging:
            self.staging[role] = StagingBuffers()
        return self.staging[role], self.slots.slot(role)

    def join(self, saves: list[Any]) -> None:
        """Wait for every role's in-flight write (every rank calls it; rank 0 joins).

        Raises:
            Exception: the background write's own error (the original class, with a note
                naming the iteration and role), on every rank, exactly once; a write that
                failed left the previous checkpoint intact and ``latest`` naming it.
        """

        def join_here() -> None:
            for pending in self.slots.join_all():
                report = pending.report
                if report is not None:
                    saves.append(report)

        mirrors, self.mirrors = self.mirrors, []
        try:
            on_rank_zero(self.collective, join_here)
        except Exception as exc:
            for mirror in mirrors:
                mirror._run(_raiser(exc))
            raise
        for mirror in mirrors:
            mirror.durable.set()
            mirror._run(lambda: None)

    def mirror(self, iteration: int, location: str, role: str = TRAINER_ROLE) -> PendingSave:
        """On a rank other than 0: the stand-in of rank 0's asynchronous save of
        ``iteration`` (``staged`` set; ``durable`` and done at the next collective join, with
        no report: the report lives on rank 0), so every rank returns the same kind of
        result."""
        pending = PendingSave(iteration=iteration, location=location, role=role)
        pending.staged.set()
        self.mirrors.append(pending)
        return pending

    def close(self) -> None:
        """Release the slots (a write never joined logs its error at ERROR)."""
        for role in self.staging:
            self.slots.slot(role).close()


def _raiser(exc: BaseException) -> Any:
    def fail() -> None:
        raise exc

    return fail
