"""The effect bindings of the ``retention`` machine (``machines/retention.toml``).

The table is the order, each step durable before the next: decide (scan + the pure decision;
nothing changes) -> invalidate (for each iteration to delete: its
``.retention-invalidated.json`` by exclusive create, then its manifest removed) -> delete (the
rest of each invalidated tree, the marker last) -> mark (``.retention-weights-only.json`` by
exclusive create) -> prune (the optimizer entries removed) -> sweep (partial directories older
than the saved iteration) -> record (``.retention-decision.json``, replaced atomically). A
crash anywhere leaves each iteration whole, or marked (never adoptable), or gone; a rerun
re-decides from disk and finishes what is marked. See ``specs/retention.toml``.

Every removal passes :func:`fence` first: the writer lease must still be ours, and the path
must be one the decision gave to this pass (a kept iteration, a pending validation, a corrupt
directory, ``latest_checkpoint.txt`` or anything outside the checkpoints root is refused).
"""

from __future__ import annotations

import logging
import sys

import attrs

from statecraft.checkpoint.fencing.fenced_store import FencedStore
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname, parse_iter_dirname
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    RETENTION_DECISION,
    WEIGHTS_ONLY_MARKER,
    DecisionRow,
    InvalidatedRecord,
    RetentionAction,
    RetentionDecision,
    WeightsOnlyRecord,
    read_decision,
)
from statecraft.checkpoint.retention.rules import RetentionPlan, decide_retention
from statecraft.checkpoint.retention.scan import (
    OPTIMIZER_ENTRIES,
    RetentionScan,
    ScanKind,
    scan_for_retention,
)
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import RetentionError, StoreConflictError
from statecraft.storage.base import Store
from statecraft.storage.local import is_temporary_name

__all__ = ["PENDING_LABEL", "RetentionContext", "fence", "plan_rows", "retention_bindings"]

log = logging.getLogger("statecraft.retention")

PENDING_LABEL = "validation pending"


@attrs.define
class RetentionContext:
    """One retention pass, after the save of ``saved_iteration`` is durable.

    Attributes:
        store: the checkpoints root (``.../<RUN_TS>/checkpoints``); ``checkpoint_artifacts/``
            is beside it, out of reach.
        plan: the policies.
        saved_iteration: the iteration just committed (partial directories older than it
            are garbage).
        lease: the writer lease, checked before every removal and publication (``None``:
            the crash harness's single writer, tools).
        scan: what ``decide`` read; ``rows``: the decision (newest first).
        to_delete / to_prune / garbage: what this pass removes (iterations to delete,
            iterations made weights-only, partial directory names).
        policies: iteration -> the policy text its marker records.
        confirmed: weights-only iterations the previous pass's decision record lists as done
            (that pass finished removing their optimizer state, durably, before recording).
        deleted / pruned / swept: what was done so far (the report's lists).
        current: the path being removed or published (named by a failure).
    """

    store: Store
    plan: RetentionPlan
    saved_iteration: int
    lease: WriterLease | None = None
    scan: RetentionScan | None = None
    rows: tuple[DecisionRow, ...] = ()
    to_delete: tuple[int, ...] = ()
    to_prune: tuple[int, ...] = ()
    garbage: tuple[str, ...] = ()
    policies: dict[int, str] = attrs.field(factory=dict)
    confirmed: frozenset[int] = frozenset()
    deleted: list[int] = attrs.field(factory=list)
    pruned: list[int] = attrs.field(factory=list)
    swept: list[str] = attrs.field(factory=list)
    current: str = ""

    @property
    def fenced(self) -> FencedStore:
        """The store every effect writes through (each publication or removal is fenced)."""
        return FencedStore(self.store, lambda path: fence(self, path))

    def decision(self) -> RetentionDecision:
        return RetentionDecision(self.saved_iteration, self.plan.describe(), self.rows)


def fence(ctx: RetentionContext, path: str) -> None:
    """Refuse a publication or removal of ``path`` this pass was not given.

    Raises:
        WriterLeaseError: the lease was taken over (or is gone).
        RetentionError: ``path`` is not inside an iteration this pass deletes, a weights-only
            iteration's marker or optimizer entries, a garbage directory that is still
            uncommitted, or the decision record.
    """
    ctx.current = path
    if ctx.lease is not None:
        ctx.lease.check()
    if path == RETENTION_DECISION:
        return
    top, _, rest = path.partition("/")
    iteration = parse_iter_dirname(top)
    if iteration in ctx.to_delete:
        return
    if iteration in ctx.to_prune and (
        rest == WEIGHTS_ONLY_MARKER or rest.split("/")[0] in OPTIMIZER_ENTRIES
    ):
        return
    if top in ctx.garbage and ctx.store.stat(f"{top}/{MANIFEST_NAME}") is None:
        return
    raise RetentionError(
        f"{ctx.store.describe()}/{path}: retention refused to touch it; the decision of this "
        f"pass (after iter_{ctx.saved_iteration:09d}) did not give it to retention. Nothing "
        "was changed; this is a bug in the retention bindings, please report it",
        path=f"{ctx.store.describe()}/{path}",
        iteration=iteration,
    )


def plan_rows(ctx: RetentionContext, scan: RetentionScan) -> tuple[DecisionRow, ...]:
    """The decision for ``scan``: the policy rows (:func:`decide_retention`), a ``DELETE`` row
    for each invalidated leftover (finished) and a ``KEEP`` row for each pending validation
    (never counted), newest first."""
    counted = scan.of_kind(ScanKind.CANDIDATE, ScanKind.WEIGHTS_ONLY)
    rows: list[DecisionRow] = []
    if ctx.plan.active and counted:
        newest = max((*scan.committed, ctx.saved_iteration))
        marked = [e.iteration for e in counted if e.kind is ScanKind.WEIGHTS_ONLY]
        rows.extend(
            decide_retention(
                [e.candidate() for e in counted],
                ctx.plan,
                newest=newest,
                latest=scan.latest,
                weights_only=marked,
            )
        )
    for e in scan.of_kind(ScanKind.INVALIDATED):
        why = f"finishing the deletion begun by retention ({e.policy or 'marker unreadable'})"
        rows.append(DecisionRow(e.iteration, RetentionAction.DELETE, (), why))
    if ctx.plan.active:
        for e in scan.of_kind(ScanKind.PENDING):
            why = "never counted while its validation is pending"
            rows.append(DecisionRow(e.iteration, RetentionAction.KEEP, (PENDING_LABEL,), why))
    return tuple(sorted(rows, key=lambda r: r.iteration, reverse=True))


# ----------------------------------------------------------------------------- observe
@observer()
def observe_retention(ctx: RetentionContext) -> str:
    """``unfinished`` when an iteration holds an invalidation marker (a pass was interrupted),
    else ``settled``; both restart at ``planned`` (a rerun re-decides from disk)."""
    for name in ctx.store.list(""):
        if parse_iter_dirname(name) is not None and INVALIDATED_MARKER in ctx.store.list(name):
            return "unfinished"
    return "settled"


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def decide(ctx: RetentionContext) -> None:
    """Scan the root and decide (no store operation that changes anything)."""
    plan = ctx.plan
    scan = scan_for_retention(ctx.store, deep=plan.active, need_weights_only=plan.model is not None)
    rows = plan_rows(ctx, scan)
    ctx.scan, ctx.rows = scan, rows
    ctx.to_delete = tuple(r.iteration for r in rows if r.action is RetentionAction.DELETE)
    ctx.to_prune = tuple(r.iteration for r in rows if r.action is RetentionAction.WEIGHTS_ONLY)
    ctx.garbage = tuple(
        e.name for e in scan.of_kind(ScanKind.PARTIAL) if e.iteration < ctx.saved_iteration
    )
    previous = read_decision(ctx.store) if plan.active else None
    if previous is not None:
        done = RetentionAction.WEIGHTS_ONLY
        ctx.confirmed = frozenset(r.iteration for r in previous.rows if r.action is done)
    by_iteration = {e.iteration: e for e in scan.entries}
    for it in ctx.to_delete:
        found = by_iteration[it]
        model = plan.model.describe() if plan.model is not None else ""
        ctx.policies[it] = found.policy if found.kind is ScanKind.INVALIDATED else model
    for it in ctx.to_prune:
        optim = plan.optimizer.describe() if plan.optimizer is not None else ""
        ctx.policies[it] = by_iteration[it].policy or optim


def _names(ctx: RetentionContext, iteration: int) -> list[str]:
    return ctx.store.list(iter_dirname(iteration))


def _publish_marker(ctx: RetentionContext, store: Store, path: str, record: bytes) -> bool:
    """Make the marker at ``path`` durable before anything it announces is removed: publish
    it by exclusive create, or, when it is already there (left by an interrupted pass, whose
    durability this process cannot know: a failed directory fsync may have dropped it for
    good), publish its own bytes again by atomic replace, which the directory fsync then
    settles. Returns whether it was new."""
    try:
        existing: bytes | None = ctx.store.read_bytes(path)
    except FileNotFoundError:
        existing = None
    if existing is None:
        try:
            store.create_exclusive(path, record)
            return True
        except StoreConflictError:  # appeared meanwhile: settle it below
            existing = ctx.store.read_bytes(path)
    store.write_atomic(path, existing)
    return False


@effect(role=Role.COORDINATOR)
def invalidate(ctx: RetentionContext) -> None:
    """For each iteration to delete: publish its invalidation marker (exclusive create,
    durable), then remove its manifest (durable): from the marker on it is never adopted."""
    store = ctx.fenced
    for it in ctx.to_delete:
        name = iter_dirname(it)
        record = InvalidatedRecord(it, ctx.policies.get(it, "")).encode()
        _publish_marker(ctx, store, f"{name}/{INVALIDATED_MARKER}", record)
        if MANIFEST_NAME in _names(ctx, it):
            store.delete(f"{name}/{MANIFEST_NAME}")


@effect(role=Role.COORDINATOR)
def delete_invalidated(ctx: RetentionContext) -> None:
    """Remove every invalidated iteration's files (each removal durable), the marker last,
    then the directory."""
    store = ctx.fenced
    for it in ctx.to_delete:
        name = iter_dirname(it)
        for child in _names(ctx, it):
            if child == INVALIDATED_MARKER:
                continue
            stat = ctx.store.stat(f"{name}/{child}")
            if stat is not None and stat.is_dir and not stat.link:
                store.delete_tree(f"{name}/{child}")
            else:
                store.delete(f"{name}/{child}")
        store.delete_tree(name)
        ctx.deleted.append(it)


@effect(role=Role.COORDINATOR)
def mark_weights_only(ctx: RetentionContext) -> None:
    """Publish the weights-only marker of each iteration whose optimizer state goes
    (exclusive create, durable), before any of its files is removed. A marker already there
    is published again (:func:`_publish_marker`) unless the previous pass's decision record
    lists the iteration as weights-only (that pass finished it durably before recording);
    marker temporaries a killed pass left are removed first."""
    store = ctx.fenced
    sweep = getattr(ctx.store, "sweep_temporaries", None)
    for it in ctx.to_prune:
        if sweep is not None and any(is_temporary_name(n) for n in _names(ctx, it)):
            fence(ctx, f"{iter_dirname(it)}/{WEIGHTS_ONLY_MARKER}")  # the lease, first
            sweep(iter_dirname(it))  # a marker's temporary left by a killed pass
        if it in ctx.confirmed:
            continue  # the previous pass finished it durably
        present = tuple(n for n in OPTIMIZER_ENTRIES if n in _names(ctx, it))
        record = WeightsOnlyRecord(it, present or OPTIMIZER_ENTRIES, ctx.policies.get(it, ""))
        if _publish_marker(
            ctx, store, f"{iter_dirname(it)}/{WEIGHTS_ONLY_MARKER}", record.encode()
        ):
            ctx.pruned.append(it)


@effect(role=Role.COORDINATOR)
def prune_optimizer(ctx: RetentionContext) -> None:
    """Remove the optimizer entries of each marked iteration (each removal durable)."""
    store = ctx.fenced
    for it in ctx.to_prune:
        name = iter_dirname(it)
        for entry in OPTIMIZER_ENTRIES:
            stat = ctx.store.stat(f"{name}/{entry}")
            if stat is None:
                continue
            if stat.is_dir and not stat.link:
                store.delete_tree(f"{name}/{entry}")
            else:
                store.delete(f"{name}/{entry}")
            if it not in ctx.pruned:
                ctx.pruned.append(it)


@effect(role=Role.COORDINATOR)
def sweep_garbage(ctx: RetentionContext) -> None:
    """Remove the partial directories (no manifest) older than the saved iteration: leftovers
    of interrupted saves, never adoptable, never counted."""
    store = ctx.fenced
    for name in ctx.garbage:
        store.delete_tree(name)
        ctx.swept.append(name)


@effect(role=Role.COORDINATOR)
def record_decision(ctx: RetentionContext) -> None:
    """Replace ``.retention-decision.json`` with this pass's decision (atomic, durable); a
    plan without policies records nothing."""
    if ctx.plan.active:
        ctx.fenced.write_atomic(RETENTION_DECISION, ctx.decision().encode())
    ctx.current = ""


def retention_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
