"""The effect bindings of the ``validation`` machine (``machines/validation.toml``).

The table is the order: save ``iter_N`` evaluation-pending (the ``save`` machine, run inside
``save_checkpoint``) -> evaluate (no I/O) -> the evaluated record -> publish (the publication
steps, the published record, the announcement). Every later stage of a committed checkpoint is a
visibility record beside its manifest (:mod:`statecraft.checkpoint.kernel.validation_records`),
published by exclusive create through a store whose fence re-reads the writer lease and lets
nothing but those records (and their temporaries) be written: committed files are never
opened, replaced or removed. This module says *how* each step acts; it never decides the order.
See ``specs/validation.toml`` for the guarantees.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.fencing.fenced_store import FencedStore
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.catalog import CheckpointState, classify
from statecraft.checkpoint.kernel.evaluation import Evaluation, format_metrics, run_evaluation
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, iter_dirname, parse_latest
from statecraft.checkpoint.kernel.manifest import Manifest
from statecraft.checkpoint.kernel.plan import TRAINER_ENTRY
from statecraft.checkpoint.kernel.validation_records import (
    EVALUATED_RECORD,
    PUBLISHED_RECORD,
    EvaluatedRecord,
    PublishedRecord,
    ValidationIdentity,
    ValidationStage,
    ValidationState,
    check_validation_identity,
    read_stage,
)
from statecraft.checkpoint.state import TrainerState
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    IterationCommittedError,
    StoreConflictError,
    StoreError,
    ValidationIdentityError,
)
from statecraft.storage.base import Store
from statecraft.storage.digest import file_digest
from statecraft.storage.local import is_temporary_name
from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = ["RECORDS", "PublicationStep", "ValidationContext", "validation_bindings"]

log = logging.getLogger("statecraft.validation")

#: the only names the validation transaction writes, each inside ``iter_N``
RECORDS = (EVALUATED_RECORD, PUBLISHED_RECORD)

#: one step of the shared publication (retention, upload: later issues), run before the
#: published record; raising leaves the checkpoint publication-pending.
PublicationStep = Callable[["ValidationContext"], None]


@attrs.define
class ValidationContext:
    """One durable validation of iteration ``iteration``.

    Attributes:
        store: the checkpoints root (``.../<RUN_TS>/checkpoints``).
        iteration: the checkpoint validated (its optimizer step; the evaluation gets it).
        evaluation: the loop's registered evaluation.
        identity: this run's validation identity (recorded in ``trainer.pt``; a checkpoint
            saved under another one is refused).
        lease: this process's writer lease, re-read before every record publication and
            removal; ``None`` (the crash harness's single writer) skips only that check.
        save: runs the ``save`` machine for ``iteration`` with ``trainer.pt`` stage
            ``EVALUATION_PENDING`` and returns its report; ``None`` when only a committed
            pending checkpoint may be continued (a resumed run).
        publication_steps: the shared publication's steps, in order, before the published
            record.
        saved: the validation state ``trainer.pt`` records (set by the observation or by the
            save).
        metrics: the evaluation's metrics (from the evaluation, or from the durable
            evaluated record when the run continued after it).
        evaluated: the evaluation was called, and succeeded, in this run.
        save_report: what ``save`` returned (``None`` when this run did not save).
        refusal: why the observation refused the iteration (raised by ``refuse``).
        notes: records the stage reading ignored, each with why.
        announcement: the INFO line the publication logged.
    """

    store: Store
    iteration: int
    evaluation: Evaluation
    identity: ValidationIdentity
    lease: WriterLease | None = None
    save: Callable[[], Any] | None = None
    publication_steps: tuple[PublicationStep, ...] = ()
    writer: Writer = attrs.field(factory=ConsolidatedWriter)
    saved: ValidationState | None = None
    metrics: dict[str, float] | None = None
    evaluated: bool = False
    save_report: Any = None
    refusal: Exception | None = None
    notes: list[str] = attrs.field(factory=list)
    announcement: str | None = None

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{self.iter_dir}"

    def path(self, name: str) -> str:
        return f"{self.iter_dir}/{name}"

    @property
    def fenced(self) -> FencedStore:
        """The store every record publication and removal acts through (see :func:`fence`)."""
        return FencedStore(self.store, lambda path: fence(self, path))


def _is_record_name(name: str) -> bool:
    """One of :data:`RECORDS`, or a temporary a writer of one left."""
    return name in RECORDS or (
        is_temporary_name(name) and any(name.startswith(f".{r}.tmp-") for r in RECORDS)
    )


def fence(ctx: ValidationContext, path: str) -> None:
    """Refuse any publication or removal but a validation record (or its temporary) of this
    iteration, and any at all once the writer lease is no longer ours.

    Raises:
        WriterLeaseError: the lease was taken over (or is gone).
        CheckpointError: ``path`` is not a validation record of ``iter_N`` (a binding bug:
            committed files are never written by this transaction).
    """
    if ctx.lease is not None:
        ctx.lease.check()
    parent, _, name = path.rpartition("/")
    if parent != ctx.iter_dir or not _is_record_name(name):
        raise CheckpointError(
            f"the validation of {ctx.where} was about to write {path}; it writes only "
            f"{list(RECORDS)} inside {ctx.iter_dir} (a committed checkpoint is never "
            "rewritten): nothing was changed"
        )


# ----------------------------------------------------------------------------- observe
def _saved_state(ctx: ValidationContext, manifest: Manifest) -> ValidationState | None:
    """The validation state of the committed ``trainer.pt``, checked against the manifest's
    size and digest first (a small file: never trusted unverified).

    Raises:
        CheckpointCorruptError / TrainerStateError: it does not match or does not parse.
    """
    path = ctx.path(TRAINER_ENTRY)
    source = f"{ctx.store.describe()}/{path}"
    entry = manifest.files.get(TRAINER_ENTRY)
    stat = ctx.store.stat(path)
    fix = "The committed checkpoint is damaged; it is not validated. Move it aside."
    if entry is None:
        raise CheckpointCorruptError(source, "is not recorded by the manifest", fix)
    if stat is None or stat.kind != "file" or stat.size != entry.size:
        found = "missing" if stat is None else f"a {stat.kind} of {stat.size} bytes"
        raise CheckpointCorruptError(source, f"is {found}; the manifest says {entry.size}", fix)
    if file_digest(ctx.store, path, entry.digest.algorithm) != entry.digest:
        raise CheckpointCorruptError(source, "does not match its recorded digest", fix)
    payload = ctx.writer.read(ctx.store, path, mmap=False)
    return TrainerState.from_payload(payload, source=source).validation


def _latest_iteration(store: Store) -> int | None:
    try:
        return parse_latest(store.read_bytes(LATEST_POINTER))
    except (FileNotFoundError, ValueError):
        return None


@observer()
def observe_validation(ctx: ValidationContext) -> str:
    """Classify ``iter_N`` for this validation (the table's ``[recover]`` keys): the catalog
    at level ``"manifest"``, then the verified ``trainer.pt``'s validation state and the
    visibility records (:func:`~statecraft.checkpoint.kernel.validation_records.read_stage`). Never
    writes; a refusal is kept in ``ctx.refusal`` for ``refuse``."""
    ctx.refusal = None
    entry = classify(ctx.store, ctx.iteration, level="manifest")
    if entry.state in (CheckpointState.ABSENT, CheckpointState.PARTIAL):
        return entry.state.value
    # At level "manifest" a committed iteration reads COMMITTED (its stage is read below);
    # any other adoptable state is taken the same way.
    if not entry.state.adoptable or entry.verified is None:
        ctx.refusal = entry.error or CheckpointCorruptError(ctx.where, entry.reason)
        return "corrupt"
    if entry.verified.manifest is None:  # pragma: no cover - classify always sets it
        raise CheckpointError(f"{ctx.where}: verified without its manifest")
    try:
        saved = _saved_state(ctx, entry.verified.manifest)
    except Exception as exc:  # anything that does not verify is corrupt, with why
        ctx.refusal = exc
        return "corrupt"
    ctx.saved = saved
    if saved is None or saved.stage is ValidationStage.NONE:
        ctx.refusal = IterationCommittedError(
            f"{ctx.where} is committed without a pending validation (trainer.pt records "
            "validation stage none: a regular save): a committed checkpoint is never "
            "rewritten, so it cannot become a validation checkpoint. Validate it ephemerally, "
            "or save the validation at a step that has no checkpoint yet",
            path=ctx.where,
        )
        return "unvalidated"
    try:
        check_validation_identity(
            saved, ctx.identity, source=f"{ctx.store.describe()}/{ctx.path(TRAINER_ENTRY)}"
        )
    except ValidationIdentityError as exc:
        ctx.refusal = exc
        return "foreign"
    reading = read_stage(ctx.store, ctx.iteration, saved)
    ctx.notes.extend(reading.notes)
    for note in reading.notes:
        log.warning(note)
    if reading.stage is ValidationStage.EVALUATION_PENDING:
        if ctx.save is not None and _latest_iteration(ctx.store) != ctx.iteration:
            return "unpointed"
        return "evaluation_pending"
    ctx.metrics = reading.metrics
    return reading.stage.value  # publication_pending / published


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def save_checkpoint(ctx: ValidationContext) -> None:
    """Save ``iter_N`` with ``trainer.pt`` stage ``EVALUATION_PENDING`` through the ``save``
    machine (its ``recover``: it writes, clears a partial one, or completes the pointer of a
    committed one), before the held-out data is read.

    Raises:
        CheckpointError: there is nothing to save with (a resumed run continues only a
            committed pending checkpoint).
        Exception: whatever the save raised (the previous checkpoint is intact).
    """
    if ctx.save is None:
        raise CheckpointError(
            f"{ctx.where} is not a committed evaluation-pending checkpoint, and a resumed "
            "validation has no payloads to save it with: finish_pending_validation continues "
            "only the checkpoint resume=auto adopted; run the step's validation again instead"
        )
    ctx.save_report = ctx.save()
    ctx.saved = ValidationState(ctx.identity, ValidationStage.EVALUATION_PENDING)


@effect(role=Role.COORDINATOR)
def evaluate(ctx: ValidationContext) -> None:
    """Call the loop's evaluation for step ``iteration`` (no store operation).

    Raises:
        ValidationFailedError: it raised or returned bad metrics; ``iter_N`` stays
            evaluation-pending.
    """
    ctx.metrics = run_evaluation(ctx.evaluation, ctx.iteration, iteration=ctx.iteration)
    ctx.evaluated = True


def _sweep_record_temporaries(ctx: ValidationContext) -> None:
    """Remove temporaries a crashed writer of a record left in ``iter_N`` (never committed
    files: only names of :func:`_is_record_name`), through the fence (lease checked)."""
    for name in ctx.store.list(ctx.iter_dir):
        if name not in RECORDS and _is_record_name(name):
            ctx.fenced.delete(ctx.path(name))


def _publish_record(
    ctx: ValidationContext, name: str, data: bytes, reached: ValidationStage
) -> None:
    """Publish record ``name`` by exclusive create. A record already there (a retry after an
    ambiguous crash) is accepted only when the stage it makes the checkpoint read is
    ``reached`` (the record is valid); its metrics are then the durable ones. A publication
    that fails otherwise is withdrawn (:func:`_withdraw`) before its error is raised.

    Raises:
        CheckpointCorruptError: the name is taken by an invalid record (never replaced).
    """
    try:
        ctx.fenced.create_exclusive(ctx.path(name), data)
        return
    except StoreConflictError:
        reading = read_stage(ctx.store, ctx.iteration, ctx.saved)
    except StoreError:
        # The name was free (no conflict): if it is taken now, this run's link took it.
        if ctx.store.stat(ctx.path(name)) is not None:
            _withdraw(ctx, name)
        raise
    order = list(ValidationStage)
    if order.index(reading.stage) < order.index(reached):
        raise CheckpointCorruptError(
            f"{ctx.store.describe()}/{ctx.path(name)}",
            "already exists and is not a valid record (" + "; ".join(reading.notes) + ")",
            "A validation record is never replaced: move it aside and resume again.",
        ) from None
    log.info("%s already holds a valid %s: kept as it is", ctx.iter_dir, name)
    ctx.metrics = reading.metrics


def _withdraw(ctx: ValidationContext, name: str) -> None:
    """This run's publication of record ``name`` failed after its link may have happened (a
    failed directory fsync): the name may be visible without being durable, and a later fsync
    cannot save it. Remove it, so what readers see is what survives a power loss (the
    record was never acknowledged; a retry publishes it again). A failure here is logged: the
    publication's own error is the one raised."""
    try:
        ctx.fenced.delete(ctx.path(name))
    except Exception as exc:  # the original error matters more; the retry sweeps again
        log.warning("could not withdraw the unacknowledged %s/%s: %s", ctx.iter_dir, name, exc)


@effect(role=Role.COORDINATOR)
def record_evaluation(ctx: ValidationContext) -> None:
    """Publish the evaluated record (the metrics and the identity) beside the manifest:
    ``iter_N`` now reads publication-pending.

    Raises:
        CheckpointError: no evaluation returned metrics in this run (the table must evaluate
            first).
        CheckpointCorruptError: an invalid record holds the name.
        WriterLeaseError / StoreError: the record was not published.
    """
    if ctx.metrics is None or not ctx.evaluated:
        raise CheckpointError(
            f"{ctx.where}: record_evaluation ran before the evaluation returned metrics; the "
            "validation table must evaluate first"
        )
    _sweep_record_temporaries(ctx)
    record = EvaluatedRecord(ctx.iteration, dict(ctx.metrics), ctx.identity)
    _publish_record(ctx, EVALUATED_RECORD, record.encode(), ValidationStage.PUBLICATION_PENDING)


@effect(role=Role.COORDINATOR)
def publish(ctx: ValidationContext) -> None:
    """The shared publication: its steps (retention, upload: later issues), then the published
    record by exclusive create, then the announcement (INFO ``published iter_N (metrics)``).

    Raises:
        CheckpointError: no evaluated metrics are known (the table must record first).
        Exception: a publication step failed; ``iter_N`` stays publication-pending.
    """
    if ctx.metrics is None:
        raise CheckpointError(
            f"{ctx.where}: publish ran before the evaluation was recorded; the validation "
            "table must record the evaluation first"
        )
    for step in ctx.publication_steps:
        step(ctx)
    _sweep_record_temporaries(ctx)
    _publish_record(
        ctx, PUBLISHED_RECORD, PublishedRecord(ctx.iteration).encode(), ValidationStage.PUBLISHED
    )
    ctx.announcement = f"published {ctx.iter_dir} ({format_metrics(ctx.metrics)})"
    log.info(ctx.announcement)


@effect(role=Role.COORDINATOR)
def settle(ctx: ValidationContext) -> None:
    """``iter_N`` was found published: clear record temporaries and make the iteration
    durable (what a killed process published may still sit in the page cache only)."""
    _sweep_record_temporaries(ctx)
    ctx.store.make_durable(ctx.iter_dir)


@effect(role=Role.COORDINATOR)
def refuse(ctx: ValidationContext) -> None:
    """Raise why the observation refused ``iter_N``; nothing is touched."""
    raise ctx.refusal or CheckpointError(f"{ctx.where} cannot be validated")


def validation_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
