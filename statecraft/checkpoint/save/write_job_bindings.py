"""The effect bindings of the ``write_job`` machine (``machines/write_job.toml``).

The write job is what one full save runs, on the training thread (a synchronous save) or on
the role's background write slot (an asynchronous one): the ``save`` machine's ``recover``
for ``iter_N`` (inside ``save_checkpoint``), then, only once that run reached ``committed``,
the archive upload of ``iter_N`` when a destination is given (inside ``upload_archive``:
best effort, a failure is logged at WARNING and the job goes on), then retention (inside
``apply_retention``). The table is the order; this module says how each
step acts. See ``specs/write_job.toml`` for the guarantees, proven by ``statecraft crashcheck
--machine write_job``.

::

    ctx = WriteJobContext(save=save_ctx, retention=RetentionPlan.from_config(config),
                          save_machine=load_machine("save"),
                          retention_machine=load_machine("retention"), lease=lease,
                          on_durable=pending.durable.set)
    report = run_write_job(ctx, load_machine("write_job"))
    report.save.final_state      # "committed"
    report.retention             # RetentionReport | None

Failure modes: the save's error ends the job in ``save_failed`` (retention did not run; the
previous checkpoint and ``latest`` are as they were); retention's error
(``RetentionError``) ends it in ``retention_failed`` after the save was durable.
:func:`run_write_job` raises either, the original exception.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.archive.catch_up import archive_saved
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.upload_bindings import UploadReport
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.retention.run import RetentionPlan, RetentionReport, run_retention
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.engine import Bindings, RunResult
from statecraft.engine.tagging import Role, collect_bindings, effect, guard, observer
from statecraft.errors import CheckpointError
from statecraft.storage.base import Store

__all__ = [
    "WriteJobContext",
    "WriteJobReport",
    "found_committed",
    "run_write_job",
    "write_job_bindings",
]

log = logging.getLogger("statecraft.write_job")


@attrs.define
class WriteJobContext:
    """One write job: the save of ``save.plan.iteration``, then retention.

    Attributes:
        save: the save transaction's context (store = the checkpoints root; its payloads
            already snapshotted for an asynchronous save).
        retention: the retention plan; ``None`` skips retention (the ``skip_retention``
            branch). An inactive plan still runs: retention then only removes garbage
            (partial leftovers older than ``iter_N``) and writes nothing else.
        save_machine: the loaded ``save`` machine.
        retention_machine: the loaded ``retention`` machine (``None`` skips retention too).
        lease: this process's writer lease (checked by the save before every publication,
            and by retention before every removal); ``None``: the harness's single writer.
        on_durable: called once, with no argument, the moment the save reached
            ``committed`` (before retention starts): an asynchronous save sets its
            ``PendingSave.durable`` event here. It must not raise (a raise is logged at
            ERROR; the job goes on: the save is durable).
        save_result: the save machine's run (set by ``save_checkpoint``, also when it failed).
        save_seconds: wall time of the save machine's run.
        retention_report: what retention returned (``None`` until it ran, or when skipped).
        retention_seconds: wall time of retention.
        durable: the save reached ``committed`` in this job (``on_durable`` was called).
        destination: where the upload archives ``iter_N`` (``None``: no upload; the
            ``skip_upload`` branch).
        upload_report: what the upload returned (``None``: skipped or failed).
        upload_error: the upload's error (logged at WARNING; the job went on).
        upload_seconds: wall time of the upload.
        collect: the collection of unreferenced blobs after retention, called with the
            checkpoints store (``checkpoint_format=incremental``; ``None``: the
            ``skip_collect`` branch). Best effort: its error is logged and kept in
            ``collect_error``.
        collect_report: what ``collect`` returned.
        collect_error: its error, if it raised.
    """

    save: SaveContext
    retention: RetentionPlan | None
    save_machine: Any
    retention_machine: Any = None
    lease: WriterLease | None = None
    on_durable: Callable[[], None] | None = None
    save_result: RunResult | None = None
    save_seconds: float = 0.0
    retention_report: RetentionReport | None = None
    retention_seconds: float = 0.0
    durable: bool = False
    destination: ArchiveDestination | None = None
    upload_report: UploadReport | None = None
    upload_error: Exception | None = None
    upload_seconds: float = 0.0
    collect: Callable[[Store], Any] | None = None
    collect_report: Any = None
    collect_error: Exception | None = None

    @property
    def iteration(self) -> int:
        return self.save.plan.iteration

    @property
    def where(self) -> str:
        return f"{self.save.store.describe()}/{self.save.iter_dir}"


@attrs.frozen
class WriteJobReport:
    """One completed write job.

    Attributes:
        iteration: the iteration saved.
        save: the save machine's run (``final_state == "committed"``; its ``trace`` and
            ``observed`` are what a ``SaveReport`` reports: effects, a retried commit).
        save_context: the save's context (``records``: the files written, their sizes).
        save_seconds: wall time of the save machine's run.
        retention: what retention did (``None`` when it was skipped).
        retention_seconds: wall time of retention (0 when skipped).
        upload: what the upload did (``None``: none planned, or it failed).
        upload_error: the upload's error when it failed (best effort: logged, not raised).
        effects: the write job's own effects and their durations, in order.
    """

    iteration: int
    save: RunResult
    save_context: SaveContext
    save_seconds: float
    retention: RetentionReport | None
    retention_seconds: float
    effects: tuple[tuple[str, float], ...]
    upload: UploadReport | None = None
    upload_error: Exception | None = None

    @property
    def bytes_written(self) -> int:
        return sum(r.size for r in self.save_context.records.values())


def run_write_job(ctx: WriteJobContext, machine: Any) -> WriteJobReport:
    """Run the write job from its start (the save machine's ``recover`` decides what the
    save does on disk) to ``retained``.

    Args:
        ctx: the job.
        machine: the loaded ``write_job`` machine.

    Returns:
        the report of the job.

    Raises:
        UnsafeStateError / StoreError / DiskFullError / WriterLeaseError / PlanDriftError /
            CheckpointCorruptError / ...: the save failed (state ``save_failed``); retention
            did not run; the previous checkpoint is intact and ``latest`` still names it.
        RetentionError / WriterLeaseError / StoreError: retention failed (state
            ``retention_failed``); ``iter_N`` is committed, durable and named by ``latest``.
    """
    result: RunResult = machine.run(ctx)
    result.raise_for_failure()
    if ctx.save_result is None:  # pragma: no cover - the table always saves first
        raise CheckpointError(f"{ctx.where}: the write job ended without running the save")
    return WriteJobReport(
        iteration=ctx.iteration,
        save=ctx.save_result,
        save_context=ctx.save,
        save_seconds=ctx.save_seconds,
        retention=ctx.retention_report,
        retention_seconds=ctx.retention_seconds,
        effects=tuple((e.effect, e.duration_s) for e in result.trace),
        upload=ctx.upload_report,
        upload_error=ctx.upload_error,
    )


def _announce_durable(ctx: WriteJobContext) -> None:
    """Call ``on_durable`` once (the save reached ``committed``)."""
    if ctx.durable:
        return
    ctx.durable = True
    if ctx.on_durable is None:
        return
    try:
        ctx.on_durable()
    except Exception:  # the save is durable whatever the hook does; never hide the hook's bug
        log.exception("the on_durable hook of the write job of %s raised", ctx.where)


# ----------------------------------------------------------------------------- observe
@observer()
def observe_write_job(ctx: WriteJobContext) -> str:
    """``durable`` when the save machine observes ``iter_N`` committed with ``latest`` naming
    it, else ``pending``. Both restart at ``planned``: the save machine's recover always runs
    first (it makes a found commit durable before retention may delete anything). Never
    writes."""
    return "durable" if ctx.save_machine.observe(ctx.save) == "committed" else "pending"


# ----------------------------------------------------------------------------- guards
@guard()
def upload_planned(ctx: WriteJobContext) -> bool:
    """An archive destination was given (``upload.enabled``)."""
    return ctx.destination is not None


@guard()
def retention_planned(ctx: WriteJobContext) -> bool:
    """A retention plan and the retention machine were given."""
    return ctx.retention is not None and ctx.retention_machine is not None


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def save_checkpoint(ctx: WriteJobContext) -> None:
    """Run the ``save`` machine's ``recover`` for ``iter_N`` (it writes the iteration, clears
    a partial one, or completes the pointer of a committed one) and require ``committed``;
    then call ``on_durable``.

    Raises:
        Exception: the save's own error (the previous checkpoint is intact).
        CheckpointError: the save ended in another state than ``committed`` without an error.
    """
    started = time.perf_counter()
    try:
        result: RunResult = ctx.save_machine.recover(ctx.save)
    finally:
        ctx.save_seconds = time.perf_counter() - started
    ctx.save_result = result
    result.raise_for_failure()
    if result.final_state != "committed":
        raise CheckpointError(
            f"the save of {ctx.where} ended in {result.final_state!r}, not 'committed'; "
            "retention runs only after a durable save: nothing was pruned"
        )
    _announce_durable(ctx)


@effect(role=Role.COORDINATOR)
def upload_archive(ctx: WriteJobContext) -> None:
    """Archive durable ``iter_N`` (the ``upload`` machine). Best effort: any failure
    (a request, the verification, a refusal) is logged at WARNING with the destination and
    the error, kept in ``upload_error``, and the job goes on to retention (which keeps the
    iteration: it holds no receipt). Once it succeeded, up to ``upload.catch_up_per_save``
    older committed iterations without a receipt are archived too (:func:`~statecraft.
    checkpoint.archive.catch_up.archive_saved`), so retention can release them.

    Raises:
        CheckpointError: the save is not known durable in this job (a table bug; nothing is
            uploaded).
    """
    if not ctx.durable:
        raise CheckpointError(
            f"the upload was about to run before the save of {ctx.where} was durable; the "
            "write job table must save first: nothing was uploaded"
        )
    destination = ctx.destination
    if destination is None:  # the upload_planned guard let this run: a table bug
        raise CheckpointError(f"{ctx.where}: upload_archive ran without a destination")
    started = time.perf_counter()
    try:  # best effort: one WARNING per failed upload; then the bounded catch-up
        outcome = archive_saved(ctx.save.store, ctx.iteration, destination, lease=ctx.lease)
        ctx.upload_report, ctx.upload_error = outcome.report, outcome.error
    finally:
        ctx.upload_seconds = time.perf_counter() - started


@effect(role=Role.COORDINATOR)
def skip_upload(ctx: WriteJobContext) -> None:
    """No archive destination: nothing to do (no store operation)."""
    ctx.upload_report = None


@effect(role=Role.COORDINATOR)
def apply_retention(ctx: WriteJobContext) -> None:
    """Run retention over the checkpoints root after the save of ``iter_N`` is durable (its
    ``run_retention``: decide from disk, mark then remove, record the decision).

    Raises:
        CheckpointError: the save is not known durable in this job (a table that orders
            retention before the save; nothing is removed).
        RetentionError / WriterLeaseError / StoreError: retention failed; ``iter_N`` stays
            committed and named by ``latest``.
    """
    if not ctx.durable:
        raise CheckpointError(
            f"retention was about to run before the save of {ctx.where} was durable; the "
            "write job table must save first: nothing was pruned"
        )
    plan = ctx.retention
    if plan is None:  # the retention_planned guard let this run: a table bug
        raise CheckpointError(f"{ctx.where}: apply_retention ran without a retention plan")
    started = time.perf_counter()
    try:
        ctx.retention_report = run_retention(
            ctx.save.store,
            plan,
            saved_iteration=ctx.iteration,
            lease=ctx.lease,
            machine=ctx.retention_machine,
        )
    finally:
        ctx.retention_seconds = time.perf_counter() - started


def found_committed(result: RunResult) -> bool:
    """The save machine's run found its iteration committed already (a retried save: it only
    completed the pointer; its bytes were not written, hence not digested, by this run)."""
    return result.observed in ("manifest_committed", "committed")


@effect(role=Role.COORDINATOR)
def skip_retention(ctx: WriteJobContext) -> None:
    """No retention plan: nothing to do (no store operation)."""
    ctx.retention_report = None


@guard()
def collect_planned(ctx: WriteJobContext) -> bool:
    """A collection of unreferenced blobs was given (``checkpoint_format=incremental``)."""
    return ctx.collect is not None


@effect(role=Role.COORDINATOR)
def collect_blobs(ctx: WriteJobContext) -> None:
    """Collect the blobs no manifest on disk references any more (after retention, so the
    blobs only pruned iterations named go). Best effort: a failure is logged at WARNING and
    kept in ``collect_error`` (garbage stays until the next job's collection; no referenced
    blob is ever removed).

    Raises:
        CheckpointError: the save is not known durable in this job (a table bug).
    """
    if not ctx.durable:
        raise CheckpointError(
            f"the blob collection was about to run before the save of {ctx.where} was "
            "durable; the write job table must save first: nothing was collected"
        )
    if ctx.collect is None:  # the collect_planned guard let this run: a table bug
        raise CheckpointError(f"{ctx.where}: collect_blobs ran without a collection")
    try:
        ctx.collect_report = ctx.collect(ctx.save.store)
    except Exception as exc:  # best effort: garbage stays; nothing referenced is removed
        ctx.collect_error = exc
        log.warning("the blob collection after the save of %s failed: %s", ctx.where, exc)


@effect(role=Role.COORDINATOR)
def skip_collect(ctx: WriteJobContext) -> None:
    """No collection planned: nothing to do (no store operation)."""
    ctx.collect_report = None


def write_job_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
