"""The effects a full save's two tables (``save``, ``dcp_save``) bind alike, whatever writes
their bulk: latest advanced onto the commit, the refusal of an iteration a save must not
touch, and the discard after a failed write. Both bindings modules import them, so each
table collects the same function (one definition, tagged here)."""

from __future__ import annotations

from typing import Protocol

from statecraft.checkpoint.fencing.fenced_store import FencedStore, discard_own_leftovers
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.commit import advance_pointer
from statecraft.checkpoint.kernel.commit_rules import refuse_untouchable
from statecraft.checkpoint.kernel.manifest import SavePlan
from statecraft.engine.tagging import Role, effect
from statecraft.storage.base import Store

__all__ = ["FullSave", "advance_latest", "discard_partial", "refuse_corrupt"]


class FullSave(Protocol):
    """What these effects read of a save context (``SaveContext``, ``DcpSaveContext``)."""

    commit_conflict: bool

    @property
    def store(self) -> Store: ...

    @property
    def plan(self) -> SavePlan: ...

    @property
    def lease(self) -> WriterLease | None: ...

    @property
    def iter_dir(self) -> str: ...

    @property
    def fenced(self) -> FencedStore: ...


@effect(role=Role.COORDINATOR)
def advance_latest(ctx: FullSave) -> None:
    """Point ``latest_checkpoint.txt`` at this iteration (atomic replace), once the lease is
    confirmed ours (another writer's newer pointer is never replaced by an older one)."""
    advance_pointer(ctx.fenced, ctx.plan.iteration)


@effect(role=Role.COORDINATOR)
def refuse_corrupt(ctx: FullSave) -> None:
    """The iteration holds a manifest that does not parse, or retention marked it: refuse to
    touch it."""
    refuse_untouchable(ctx.store, ctx.plan.iteration, ctx.iter_dir)


@effect(role=Role.COORDINATOR)
def discard_partial(ctx: FullSave) -> None:
    """After a failed write (on any rank): remove this iteration's files (every rank's
    shards) so a full disk is not left fuller.

    This includes a manifest this save published itself: the save failed before it was
    acknowledged, and after a failed fsync that manifest may never become durable. Only when
    the manifest's exclusive create met another writer's commit, or the fence refused, is the
    directory kept.
    """
    discard_own_leftovers(
        ctx.store, ctx.iter_dir, conflict=ctx.commit_conflict, lease=ctx.lease, label=ctx.iter_dir
    )
