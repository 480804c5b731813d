"""Commit-aware retention: the plan, the decision and one pass over a checkpoints root.

A pass runs after a save is durable (sync and async alike, inside the save's write job; after
publication for a durable validation)::

    plan = RetentionPlan.from_config(config)            # keep_optim_last / keep_model_last
    plan = RetentionPlan(optimizer=LatestN(1), model=AnyOf((LatestN(3), BestN(1, "val_loss"))))
    report = run_retention(store, plan, saved_iteration=600, lease=lease)
    report.weights_only, report.deleted, report.garbage  # what this pass removed

The rules (whatever a policy says) are in :mod:`statecraft.checkpoint.retention.rules`; the
order on disk, each step durable, is the ``retention`` machine's table
(``machines/retention.toml``, ``specs/retention.toml``):

- weights-only: ``iter_N/.retention-weights-only.json`` (exclusive create), then ``optim.pt``;
- delete: ``iter_N/.retention-invalidated.json`` (exclusive create), then the manifest, then
  the rest of the tree;
- then ``checkpoints/.retention-decision.json`` (atomic replace; for ``statecraft inspect``).

A crash anywhere leaves each iteration whole, marked (never adoptable) or gone, and the next
pass finishes what is marked. ``keep_model_last=1`` is allowed, async included: the previous
checkpoint is deleted only after the new one is durable, so at least one committed checkpoint
always exists.
"""

from __future__ import annotations

import functools
import logging
import time

import attrs

from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.retention_records import RetentionDecision
from statecraft.checkpoint.retention.bindings import RetentionContext
from statecraft.checkpoint.retention.rules import RetentionPlan, decide_retention
from statecraft.engine import Machine
from statecraft.errors import RetentionError, WriterLeaseError
from statecraft.storage.base import Store

__all__ = ["RetentionPlan", "RetentionReport", "decide_retention", "run_retention"]

log = logging.getLogger("statecraft.retention")


@attrs.frozen
class RetentionReport:
    """What one pass decided and did.

    Attributes:
        saved_iteration: the save it followed.
        decision: the rows (newest first) and the plan's description (what the decision
            record holds; empty rows when no policy is active).
        weights_only: iterations whose optimizer state this pass removed (or finished
            removing), newest first.
        deleted: iterations this pass deleted (or finished deleting), newest first.
        garbage: partial directories (``iter_<9 digits>``) it removed.
        seconds: wall time of the pass.
    """

    saved_iteration: int
    decision: RetentionDecision
    weights_only: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()
    garbage: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        """The pass removed something."""
        return bool(self.weights_only or self.deleted or self.garbage)


@functools.cache
def _shipped_machine() -> Machine:
    from statecraft.checkpoint.kernel.machines import load_machine

    return load_machine("retention")


def run_retention(
    store: Store,
    plan: RetentionPlan,
    *,
    saved_iteration: int,
    lease: WriterLease | None,
    machine: Machine | None = None,
) -> RetentionReport:
    """One retention pass over the checkpoints root ``store`` after ``saved_iteration`` is
    committed and durable: the ``retention`` machine's ``recover`` (observe, then re-decide
    from disk and act). A plan with no policy still finishes invalidated leftovers and
    removes garbage partial directories (its report is empty when there are none).

    Args:
        lease: the writer lease, checked before every removal (``None``: a single-writer
            tool or the crash harness).
        machine: the retention machine (default: the shipped ``machines/retention.toml``;
            the crash harness passes deliberately broken ones).

    Raises:
        RetentionError: a removal failed; names the path, says that ``iter_<saved>`` is
            committed and durable, and the fix. What was marked is finished by the next pass.
        WriterLeaseError: another process took over the attempt; nothing more was removed.
    """
    _say_notice_once(store, plan)
    started = time.perf_counter()
    ctx = RetentionContext(store, plan, saved_iteration, lease)
    result = (machine or _shipped_machine()).recover(ctx)
    if result.failed:
        raise _failure(ctx, result.error)
    report = RetentionReport(
        saved_iteration,
        ctx.decision(),
        tuple(sorted(ctx.pruned, reverse=True)),
        tuple(sorted(ctx.deleted, reverse=True)),
        tuple(ctx.swept),
        time.perf_counter() - started,
    )
    if report.changed:
        log.info(
            "retention after iter_%09d (%s): optimizer state removed from %s, deleted %s, "
            "garbage removed %s",
            saved_iteration,
            plan.describe(),
            list(report.weights_only) or "none",
            list(report.deleted) or "none",
            list(report.garbage) or "none",
        )
    return report


#: the checkpoints roots whose plan notice this process has said (once per run's root)
_NOTICED: set[str] = set()


def _say_notice_once(store: Store, plan: RetentionPlan) -> None:
    """Log the plan's notice at the first pass over ``store`` in this process."""
    if not plan.notice or store.describe() in _NOTICED:
        return
    _NOTICED.add(store.describe())
    log.info("%s", plan.notice)


def _failure(ctx: RetentionContext, error: BaseException | None) -> BaseException:
    if isinstance(error, WriterLeaseError | RetentionError):
        return error
    saved = f"iter_{ctx.saved_iteration:09d}"
    where = f"{ctx.store.describe()}/{ctx.current}" if ctx.current else ctx.store.describe()
    found = f"{type(error).__name__}: {error}" if error is not None else "the pass failed"
    failure = RetentionError(
        f"retention could not remove {where} ({found}). {saved} is committed and durable and "
        "latest names it; nothing retention keeps was touched, and an iteration it had begun "
        "to remove is marked (weights-only or invalidated, never adopted) and is finished by "
        "the next pass. Fix the cause (permissions, a read-only or failing disk) and save "
        "again, or set keep_optim_last=0 and keep_model_last=0 to turn retention off",
        path=where,
        iteration=ctx.saved_iteration,
    )
    failure.__cause__ = error
    return failure
