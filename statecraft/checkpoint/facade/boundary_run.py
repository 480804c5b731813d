"""Running one boundary decision: what ``Checkpointer.step_end()`` / ``finalize()`` /
``save()`` do once :func:`~statecraft.checkpoint.facade.boundary.decide_boundary` said what is due.

::

    kind                      what runs (rank 0, through on_rank_zero)
    NOTHING                   nothing
    SAVE                      save_full_checkpoint          (machines/write_job.toml: save,
                                                             then retention; asynchronous
                                                             with save_async)
    ARTIFACT                  save_artifact                 (machines/artifact.toml)
    DURABLE_VALIDATION        run_durable_validation        (machines/validation.toml),
                                                            then retention once published
    ARTIFACT_THEN_EVALUATE    save_artifact(evaluation=..., evaluate_first=False)
    EVALUATE_THEN_ARTIFACT    save_artifact(evaluation=..., evaluate_first=True)
    EVALUATE                  run_evaluation                (ephemeral: metrics only)

Every rank gathers its RNG streams and data state (collectives) before rank 0 runs the
machine; the outcome (a report, or the exception) reaches every rank, so a
:class:`~statecraft.errors.ValidationFailedError` is raised on every rank. The evaluation
callable runs on rank 0 only (a documented limitation of this release).

Every writing or evaluating boundary first joins the background writes
(:class:`~statecraft.checkpoint.async_writes.role_slots.BackgroundWrites`, collective): only a full
save may
be asynchronous, and the next one reuses the staging buffers.

The partial-artifact store (``<run>/checkpoint_artifacts``) is created at the first artifact
save only: a reader never creates it
(:func:`~statecraft.checkpoint.facade.attempt_open.artifacts_store`).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.upload_bindings import upload_checkpoint
from statecraft.checkpoint.artifacts.saving import ArtifactReport, save_artifact
from statecraft.checkpoint.async_writes.role_slots import BackgroundWrites
from statecraft.checkpoint.async_writes.write_slot import PendingSave
from statecraft.checkpoint.facade.attempt_open import artifacts_store
from statecraft.checkpoint.facade.boundary import (
    Boundary,
    BoundaryKind,
)
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.evaluation import Evaluation, format_metrics, run_evaluation
from statecraft.checkpoint.kernel.layout import RunAttempt
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.validation_records import (
    ValidationIdentity,
    ValidationStage,
    ValidationState,
)
from statecraft.checkpoint.retention.run import RetentionPlan, RetentionReport, run_retention
from statecraft.checkpoint.save.saving import SaveReport, save_full_checkpoint
from statecraft.checkpoint.state import gather_data_state, gather_rng_inventory
from statecraft.checkpoint.state.capture import gather_into
from statecraft.checkpoint.validation.bindings import PublicationStep, ValidationContext
from statecraft.checkpoint.validation.saving import ValidationReport, run_durable_validation
from statecraft.engine import Machine
from statecraft.errors import CheckpointError
from statecraft.parallel.collectives import Collective
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem

__all__ = ["WRITING", "BoundaryOutcome", "BoundaryRunner"]

log = logging.getLogger("statecraft")
upload_log = logging.getLogger("statecraft.publish")

#: the kinds that write something (and therefore need the save-without-resume check)
WRITING = frozenset(
    {
        BoundaryKind.SAVE,
        BoundaryKind.ARTIFACT,
        BoundaryKind.DURABLE_VALIDATION,
        BoundaryKind.ARTIFACT_THEN_EVALUATE,
        BoundaryKind.EVALUATE_THEN_ARTIFACT,
    }
)
#: the kinds that call the evaluation
EVALUATING = frozenset(
    {
        BoundaryKind.DURABLE_VALIDATION,
        BoundaryKind.ARTIFACT_THEN_EVALUATE,
        BoundaryKind.EVALUATE_THEN_ARTIFACT,
        BoundaryKind.EVALUATE,
    }
)


@attrs.frozen
class BoundaryOutcome:
    """What one executed boundary produced (on rank 0; reports are ``None`` elsewhere).

    Attributes:
        saved: the full checkpoint's report (a regular save, or the durable validation's
            evaluation-pending save); a :class:`PendingSave` for an asynchronous save.
        artifact: the partial artifact's report.
        validation: the durable validation's report (its final stage and metrics).
        metrics: the evaluation's metrics (``None`` when no evaluation ran, and on ranks
            other than 0).
        validated: an evaluation ran and succeeded at this boundary (every rank).
        wrote: a checkpoint or artifact of the step was committed (every rank).
    """

    saved: SaveReport | PendingSave | None = None
    artifact: ArtifactReport | None = None
    validation: ValidationReport | None = None
    metrics: dict[str, float] | None = None
    validated: bool = False
    wrote: bool = False


def publish_committed_artifact(
    artifacts: Store, step: int, destination: ArchiveDestination, *, lease: WriterLease | None
) -> Any:
    """Publish committed artifact ``iter_<step>`` (the ``publish`` machine), best effort: a
    failure is logged at WARNING with the destination and the error (the local artifact is
    kept); returns the ``PublishReport`` or ``None``."""
    where = destination.uri(destination.artifact_prefix(step))
    try:
        from statecraft.checkpoint.archive.publish_bindings import publish_artifact
    except ImportError:  # the publish transaction is not installed in this build
        upload_log.warning(
            "artifact iter %d is not published to %s: no publish transaction", step, where
        )
        return None
    try:
        return publish_artifact(artifacts, step, destination, lease=lease)
    except Exception as exc:  # best effort: the committed local artifact stands
        upload_log.warning(
            "the publication of artifact iter %d to %s failed (the local artifact is kept): %s",
            step, where, exc,
        )  # fmt: skip
        return None


class BoundaryRunner:
    """Runs the decided boundary for one ``Checkpointer`` (holds its loaded machines, the
    registered evaluation, the lazily created artifacts store, the background writes and the
    retention plan)."""

    def __init__(
        self,
        collective: Collective,
        filesystem: Filesystem | None,
        *,
        writes: BackgroundWrites | None = None,
        retention: RetentionPlan | None = None,
        checkpoint_format: str = "consolidated",
        backend: str = "local",
    ) -> None:
        self.collective = collective
        # full saves of checkpoint_format=dcp run on every rank (dcp_saving.py); an
        # object-store primary (backend=object_store) saves through checkpoint/direct/
        self.checkpoint_format = checkpoint_format
        self.backend = backend
        self.direct_root: Any = None  # the DirectRoot of backend=object_store (opened lazily)
        self.direct_lease: Any = None  # its ObjectStoreLease (rank 0; taken by the direct code)
        self.filesystem = filesystem
        self.writes = writes or BackgroundWrites(collective, enabled=False)
        self.retention = retention
        # where full saves are archived (upload.enabled; set on rank 0 by resume()/first use)
        self.destination: ArchiveDestination | None = None
        self.retained: list[RetentionReport] = []  # passes run after a durable validation
        self.evaluation: Evaluation | None = None
        self.identity = ValidationIdentity()
        self.artifacts: Store | None = None
        self._machines: dict[str, Machine] = {}

    def machine(self, name: str) -> Machine:
        """The loaded ``machines/<name>.toml`` (loaded once)."""
        if name not in self._machines:
            self._machines[name] = load_machine(name)
        return self._machines[name]

    def _gather(self, tracked: Any) -> tuple[Any, Any]:
        """Every rank's RNG streams and data state (a collective: every rank calls it)."""
        collective = self.collective
        rng = gather_rng_inventory(
            rank=collective.rank,
            world_size=collective.world_size,
            all_gather_object=None if collective.world_size == 1 else gather_into(collective),
        )
        source = tracked.data
        data = None if source is None else gather_data_state(source, collective=collective)
        return rng, data

    def _artifacts(self, attempt: RunAttempt) -> Store:
        if self.artifacts is None:  # created by the first artifact save, never by a reader
            self.artifacts = artifacts_store(attempt, self.filesystem, create=True)
        assert self.artifacts is not None
        return self.artifacts

    def run(
        self,
        boundary: Boundary,
        *,
        tracked: Any,
        attempt: RunAttempt,
        store: Store,
        lease: WriterLease | None,
        step: int,
    ) -> BoundaryOutcome:
        """Execute ``boundary`` for ``step`` (every rank calls it; rank 0 writes).

        Raises:
            ValidationFailedError: the evaluation failed (every rank); what was committed
                before it (an evaluation-pending checkpoint, an artifact committed before an
                ephemeral evaluation) stays committed, and nothing after it was written.
            (and what the save / artifact / validation machines raise)
        """
        kind = boundary.kind
        if kind is BoundaryKind.NOTHING:
            return BoundaryOutcome()
        evaluation = self.evaluation
        if kind in EVALUATING and evaluation is None:  # pragma: no cover - decide_boundary bug
            raise AssertionError(f"{kind} decided with no registered evaluation")
        if kind is BoundaryKind.EVALUATE:
            assert evaluation is not None
            metrics = on_rank_zero(self.collective, lambda: self.evaluate(evaluation, step))
            return BoundaryOutcome(metrics=metrics, validated=True)
        rng, data = self._gather(tracked)
        if kind is BoundaryKind.SAVE and self.checkpoint_format == "dcp":
            # every rank writes its own shards: no on_rank_zero around the save
            report = self.save_sharded(tracked, attempt, store, lease, step, rng, data)
            return BoundaryOutcome(saved=report, wrote=True)
        out: list[BoundaryOutcome] = []

        def write_here() -> str | None:
            out.append(self._write(boundary, tracked, attempt, store, lease, step, rng, data))
            saved = out[0].saved
            return saved.location if isinstance(saved, PendingSave) else None

        # Rank 0 decides async vs sync; the decision reaches every rank with the outcome.
        went_async = on_rank_zero(self.collective, write_here)
        if out:
            return out[0]
        mirror = None if went_async is None else self.writes.mirror(step, went_async)
        return BoundaryOutcome(saved=mirror, validated=kind in EVALUATING, wrote=True)

    def evaluate(self, evaluation: Evaluation, step: int) -> dict[str, float]:
        """An ephemeral evaluation of ``step`` (rank 0): its metrics, logged."""
        metrics = run_evaluation(evaluation, step)
        log.info("validated step %d (ephemeral): %s", step, format_metrics(metrics))
        return metrics

    def _write(
        self,
        boundary: Boundary,
        tracked: Any,
        attempt: RunAttempt,
        store: Store,
        lease: WriterLease | None,
        step: int,
        rng: Any,
        data: Any,
    ) -> BoundaryOutcome:
        kind = boundary.kind
        if kind is BoundaryKind.SAVE:
            report = self.save_full(tracked, attempt, store, lease, step, rng, data)
            return BoundaryOutcome(saved=report, wrote=True)
        if kind is BoundaryKind.DURABLE_VALIDATION:
            assert self.evaluation is not None
            validation = run_durable_validation(
                tracked,
                store,
                evaluation=self.evaluation,
                identity=self.identity,
                rng=rng,
                data=data,
                step=step,
                lease=lease,
                save_machine=self.machine("save"),
                machine=self.machine("validation"),
                location=str(attempt.checkpoints_dir),
                publication_steps=self.publication_steps(),
            )
            self.retain(store, step, lease)
            return BoundaryOutcome(
                saved=validation.save,
                validation=validation,
                metrics=validation.metrics,
                validated=True,
                wrote=True,
            )
        evaluate = kind in EVALUATING
        plan = boundary.plan
        if plan is None:  # pragma: no cover - decide_boundary names the plan of an artifact
            raise AssertionError(f"{kind} decided without a component plan")
        artifact = self.save_artifact(
            tracked,
            attempt,
            plan=plan,
            rng=rng,
            data=data,
            step=step,
            lease=lease,
            evaluation=self.evaluation if evaluate else None,
            evaluate_first=kind is BoundaryKind.EVALUATE_THEN_ARTIFACT,
        )
        return BoundaryOutcome(
            artifact=artifact, metrics=artifact.metrics, validated=evaluate, wrote=True
        )

    def save_full(
        self,
        tracked: Any,
        attempt: RunAttempt,
        store: Store,
        lease: WriterLease | None,
        step: int,
        rng: Any,
        data: Any,
        *,
        stage: ValidationStage = ValidationStage.NONE,
        background: bool = True,
    ) -> SaveReport | PendingSave:
        """One full checkpoint of ``step`` at validation ``stage`` (rank 0): a cadence save
        goes through the role's slot (asynchronous when it can be) and runs retention;
        ``background=False`` (the emergency save) writes synchronously and runs no retention
        (a ``SaveReport``)."""
        staging, slot = self.writes.for_save() if background else (None, None)
        return save_full_checkpoint(
            tracked,
            store,
            rng=rng,
            data=data,
            step=step,
            lease=lease,
            machine=self.machine("save"),
            location=str(attempt.checkpoints_dir),
            validation=ValidationState(self.identity, stage),
            retention=self.retention if background else None,
            staging=staging,
            slot=slot,
            machines=self.machine,
            # the emergency save uploads after DONE.json (emergency_step), not before it
            destination=self.destination if background else None,
        )

    def save_sharded(
        self,
        tracked: Any,
        attempt: RunAttempt,
        store: Store,
        lease: WriterLease | None,
        step: int,
        rng: Any,
        data: Any,
        *,
        stage: ValidationStage = ValidationStage.NONE,
        background: bool = True,
    ) -> SaveReport:
        """One full DCP checkpoint of ``step`` (every rank calls it): with a local store the
        ``dcp_save`` machine (:func:`~statecraft.checkpoint.save.dcp_saving.save_dcp_checkpoint`,
        then upload and retention on rank 0), with ``backend=object_store`` the direct save
        (``statecraft.checkpoint.direct.saving.save_direct_checkpoint``). Always synchronous:
        DCP writes are collective, so ``save_async`` does not apply to them.
        ``background=False`` (the emergency save) runs no retention and no upload (the
        emergency uploads after ``DONE.json``)."""
        validation = ValidationState(self.identity, stage)
        if self.backend == "object_store":
            return self._save_direct(tracked, attempt, step, rng, data, validation)
        from statecraft.checkpoint.save.dcp_saving import save_dcp_checkpoint

        return save_dcp_checkpoint(
            tracked,
            store,
            collective=self.collective,
            rng=rng,
            data=data,
            step=step,
            lease=lease,
            location=str(attempt.checkpoints_dir),
            validation=validation,
            retention=self.retention if background else None,
            machines=self.machine,
            destination=self.destination if background else None,
        )

    def _save_direct(
        self,
        tracked: Any,
        attempt: RunAttempt,
        step: int,
        rng: Any,
        data: Any,
        validation: ValidationState,
    ) -> SaveReport:
        """The direct object-store save (h4's ``checkpoint/direct``; imported only when the
        backend asks for it). ``direct_root`` / ``direct_lease`` are set up by the direct
        code's facade wiring before the first save."""
        from statecraft.checkpoint.direct.saving import (  # type: ignore[import-not-found,unused-ignore]
            save_direct_checkpoint,
        )

        if self.direct_root is None:
            raise CheckpointError(
                "checkpoint_store.backend=object_store: the direct root was not opened before "
                "the first save (Checkpointer.resume() opens it); call resume() first"
            )
        report: SaveReport = save_direct_checkpoint(
            tracked,
            self.direct_root,
            collective=self.collective,
            rng=rng,
            data=data,
            step=step,
            lease=self.direct_lease,
            validation=validation,
        )
        return report

    def publication_steps(self) -> tuple[PublicationStep, ...]:
        """The steps of a durable validation's publication: with an archive destination, the
        strict upload of the evaluated checkpoint (a failure raises: it stays
        publication-pending and a resumed run publishes it without evaluating again)."""
        destination = self.destination
        if destination is None:
            return ()

        def upload(ctx: ValidationContext) -> None:
            upload_checkpoint(
                ctx.store, ctx.iteration, destination, lease=ctx.lease, pending_ok=True
            )

        return (upload,)

    def retain(self, store: Store, step: int, lease: WriterLease | None) -> None:
        """Retention after the durable validation of ``step`` was published (rank 0); its
        evaluation-pending save ran none (a pending checkpoint is never counted).

        Raises:
            RetentionError: ``iter_<step>`` is published and durable; a removal failed.
        """
        plan = self.retention
        if plan is None:
            return
        self.retained.append(
            run_retention(
                store, plan, saved_iteration=step, lease=lease, machine=self.machine("retention")
            )
        )

    def save_artifact(
        self,
        tracked: Any,
        attempt: RunAttempt,
        *,
        plan: ComponentPlan,
        rng: Any,
        data: Any,
        step: int,
        lease: WriterLease | None,
        evaluation: Evaluation | None,
        evaluate_first: bool,
    ) -> ArtifactReport:
        """One partial artifact of ``step`` through ``machines/artifact.toml`` (rank 0); with
        an archive destination, once committed it is published (best effort: a failure is
        logged at WARNING and the local artifact is kept)."""
        artifacts = self._artifacts(attempt)
        report = save_artifact(
            tracked,
            artifacts,
            plan=plan,
            rng=rng,
            data=data,
            step=step,
            lease=lease,
            machine=self.machine("artifact"),
            location=str(attempt.artifacts_dir),
            evaluation=evaluation,
            evaluate_first=evaluate_first,
        )
        if self.destination is not None:
            publish_committed_artifact(artifacts, step, self.destination, lease=lease)
        return report
