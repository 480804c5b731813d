"""The checks named by ``specs/roles_prune.toml``.

They judge with the oracle of :mod:`statecraft.proofs.roles.checks` (the raw simulated-disk
bytes, the markers' and role manifests' JSON parsed there, every file hashed there), never the
production reader or scan. Each raises :class:`~statecraft.proofs.GuaranteeViolation` with what
it found, and calls ``ctx.exercised()`` when it asserted something in the state it was given.
"""

from __future__ import annotations

from statecraft.checkpoint.roles.layout import MARKER_NAME
from statecraft.proofs.roles.checks import boundary_problem
from statecraft.proofs.roles.prune_scenarios import (
    COMMITTED,
    KEPT,
    PARTIAL,
    SAVED,
    RolesPruneRecovery,
)
from statecraft.proofs.roles.scenarios import ROLES_ROOT
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "acknowledged_pass_is_durable",
    "kept_boundaries_untouched",
    "marker_only_over_whole_boundaries",
    "rerun_leaves_the_kept_boundaries",
]

GONE = tuple(sorted({*COMMITTED, PARTIAL} - set(KEPT)))


def _under(tree: dict[str, bytes], iteration: int) -> dict[str, bytes]:
    prefix = f"iter_{iteration:09d}/"
    return {p: d for p, d in tree.items() if p.startswith(prefix)}


def marker_only_over_whole_boundaries(ctx: CheckContext) -> None:
    """RP-MARKER-WHOLE: every ``_SUCCESS`` on disk names committed, intact role units."""
    tree = ctx.world.fs.tree(ROLES_ROOT)
    ctx.exercised()
    for path in sorted(p for p in tree if p.endswith("/" + MARKER_NAME)):
        problem = boundary_problem(tree, int(path[5:14]))
        if problem is not None:
            raise GuaranteeViolation(f"a half-deleted boundary looks committed: {problem}")


def kept_boundaries_untouched(ctx: CheckContext) -> None:
    """RP-KEPT-UNTOUCHED: boundaries 4 and 5 hold exactly their setup bytes."""
    before, now = ctx.before.fs.tree(ROLES_ROOT), ctx.world.fs.tree(ROLES_ROOT)
    ctx.exercised()
    for iteration in KEPT:
        if _under(now, iteration) != _under(before, iteration):
            raise GuaranteeViolation(f"the kept boundary iter_{iteration:09d} was changed")


def rerun_leaves_the_kept_boundaries(ctx: CheckContext) -> None:
    """RP-RERUN: after the rerun pass nothing of boundaries 1, 2, 3 is left and the reader
    adopts boundary 5."""
    recovery = ctx.recovery
    if not isinstance(recovery, RolesPruneRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {recovery!r}")
    ctx.exercised()
    if recovery.outcome is not None:
        raise GuaranteeViolation(f"the rerun pass failed: {recovery.outcome!r}")
    tree = ctx.world.fs.tree(ROLES_ROOT)
    left = [i for i in GONE if _under(tree, i)]
    if left:
        raise GuaranteeViolation(f"the rerun pass left boundaries {left}")
    if recovery.adopted != SAVED:
        raise GuaranteeViolation(f"the reader adopted {recovery.adopted}, not {SAVED}")


def acknowledged_pass_is_durable(ctx: CheckContext) -> None:
    """RP-DURABLE-ON-RETURN: once the pass returned, nothing of 1, 2, 3 is left."""
    if not ctx.acknowledged:
        return
    ctx.exercised()
    tree = ctx.world.fs.tree(ROLES_ROOT)
    left = [i for i in GONE if _under(tree, i)]
    if left:
        raise GuaranteeViolation(f"the returned pass's deletions came back: {left}")
