"""How one step's state is written, whichever boundary asked: a full checkpoint (consolidated
on rank 0, DCP on every rank, or into the direct object-store root), a partial artifact, and
what follows a durable validation's publication (upload, retention).

::

    capture = gather_capture(context, state, step)      # every rank: RNG streams, data state
    report = saver.full(opened, capture)                # rank 0: a cadence save (maybe async)
    report = saver.full(opened, capture, stage=EVALUATION_PENDING, background=False)
    shards = saver.sharded(opened, capture)             # every rank (checkpoint_format=dcp)
    artifact = saver.artifact(opened, capture, plan=plan, evaluation=None, evaluate_first=False)

The :class:`StepSaver` reads the run's fixed parts (:class:`RunContext`, :class:`OpenAttempt`)
and the moving ones it needs (:class:`RunState`: the background writes, the validation
identity, the artifacts store it creates); the boundary runner and the emergency save both
write through it.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.upload_bindings import upload_checkpoint
from statecraft.checkpoint.artifacts.saving import ArtifactReport, save_artifact
from statecraft.checkpoint.async_writes.write_slot import PendingSave
from statecraft.checkpoint.data import capture_data
from statecraft.checkpoint.facade.attempt_open import artifacts_store
from statecraft.checkpoint.facade.run_context import OpenAttempt, RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.incremental import incremental_save_parts
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.evaluation import Evaluation
from statecraft.checkpoint.kernel.validation_records import ValidationStage, ValidationState
from statecraft.checkpoint.retention.run import run_retention
from statecraft.checkpoint.save.saving import SaveMachines, SaveReport, SaveTarget, save_checkpoint
from statecraft.checkpoint.state import gather_rng_inventory
from statecraft.checkpoint.state.capture import gather_into
from statecraft.checkpoint.validation.bindings import PublicationStep, ValidationContext
from statecraft.errors import CheckpointError
from statecraft.storage.base import Store

__all__ = ["StepCapture", "StepSaver", "gather_capture", "publish_committed_artifact"]

upload_log = logging.getLogger("statecraft.publish")


@attrs.frozen
class StepCapture:
    """What every rank gathered for one save of ``step``: the RNG streams of every rank and
    the data state of every rank (``None``: no data source tracked)."""

    step: int
    rng: Any
    data: Any


def gather_capture(
    context: RunContext, state: RunState, step: int, *, emergency: bool = False
) -> StepCapture:
    """Every rank's RNG streams and data state for a save of ``step`` (a collective: every
    rank calls it); how the save stores the model's moving copies is decided here
    (``ModelCopies.prepare_save``: an ``emergency`` save stores old whole)."""
    state.copies.prepare_save(step, emergency=emergency)
    collective = context.collective
    rng = gather_rng_inventory(
        rank=collective.rank,
        world_size=collective.world_size,
        all_gather_object=None if collective.world_size == 1 else gather_into(collective),
    )
    source = state.tracked.data
    data = (
        None
        if source is None
        else capture_data(
            source,
            declared=state.tracked.data_identity,
            collective=collective,
            mode=context.config.data.cursor_resume,
        )
    )
    return StepCapture(step, rng, data)


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


class StepSaver:
    """Writes one step's state for a run (``context``: what is fixed; ``state``: its background
    writes, validation identity and artifacts store)."""

    def __init__(self, context: RunContext, state: RunState) -> None:
        self.context = context
        self.state = state
        self._incremental: tuple[Any, Any, Any] | None = None  # (lease, writer, collect)

    def _incremental_parts(self, lease: WriterLease | None) -> tuple[Any, Any]:
        """The incremental writer factory and collection of this run (made once per lease:
        the writers share whether ``blobs/`` was made durable by this process)."""
        if self._incremental is None or self._incremental[0] is not lease:
            self._incremental = (lease, *incremental_save_parts(lease))
        return self._incremental[1], self._incremental[2]

    def target(self, opened: OpenAttempt, *, background: bool) -> SaveTarget:
        """Where a full save of this run writes: a cadence save (``background``) runs
        retention and the upload; the emergency save neither (it uploads after
        ``DONE.json``)."""
        machines = self.context.machines
        writer, collect = None, None
        if self.context.config.checkpoint_format == "incremental":
            writer, collect = self._incremental_parts(opened.lease)
        return SaveTarget(
            store=opened.store,
            lease=opened.lease,
            machines=SaveMachines.of(machines.load("save"), machines.load),
            location=opened.checkpoints_location,
            retention=self.context.retention if background else None,
            destination=opened.destination if background else None,
            writer=writer,
            collect=collect if background else None,
        )

    def full(
        self,
        opened: OpenAttempt,
        capture: StepCapture,
        *,
        stage: ValidationStage = ValidationStage.NONE,
        background: bool = True,
    ) -> SaveReport | PendingSave:
        """One full checkpoint at validation ``stage`` (rank 0): a cadence save goes through
        the role's slot (asynchronous when it can be) and runs retention;
        ``background=False`` (the emergency save) writes synchronously and runs no retention
        (a ``SaveReport``)."""
        staging, slot = self.state.writes.for_save() if background else (None, None)
        return save_checkpoint(
            self.state.tracked,
            self.target(opened, background=background),
            rng=capture.rng,
            data=capture.data,
            step=capture.step,
            validation=ValidationState(self.state.identity, stage),
            staging=staging,
            slot=slot,
        )

    def sharded(
        self,
        opened: OpenAttempt,
        capture: StepCapture,
        *,
        stage: ValidationStage = ValidationStage.NONE,
        background: bool = True,
    ) -> SaveReport | PendingSave:
        """One full DCP checkpoint (every rank calls it): with a local store the ``dcp_save``
        machine (:func:`~statecraft.checkpoint.save.dcp_saving.save_dcp_checkpoint`, then
        upload and retention on rank 0), with ``backend=object_store`` the direct save
        (:func:`~statecraft.checkpoint.direct.saving.save_direct_checkpoint`). With
        ``save_async=true`` and a local store a cadence save is asynchronous (a
        :class:`PendingSave` on every rank, :mod:`statecraft.checkpoint.save.dcp_async`).
        ``background=False`` (the emergency save) runs no retention and no upload (the
        emergency uploads after ``DONE.json``).

        Raises:
            CheckpointError: ``backend=object_store`` and ``resume()`` did not open the
                direct root.
        """
        validation = ValidationState(self.state.identity, stage)
        if self.context.config.checkpoint_store.backend == "object_store":
            return self._direct(capture, validation)
        from statecraft.checkpoint.save.dcp_async import (
            DcpBackgroundWrites,
            save_dcp_checkpoint_async,
        )
        from statecraft.checkpoint.save.dcp_saving import save_dcp_checkpoint

        writes = self.state.writes
        if background and isinstance(writes, DcpBackgroundWrites):  # save_async=true
            return save_dcp_checkpoint_async(
                self.state.tracked,
                opened.store,
                writes=writes,
                rng=capture.rng,
                data=capture.data,
                step=capture.step,
                location=opened.checkpoints_location,
                validation=validation,
                lease=opened.lease,
                retention=self.context.retention,
                machines=self.context.machines.load,
                destination=opened.destination,
            )
        return save_dcp_checkpoint(
            self.state.tracked,
            opened.store,
            collective=self.context.collective,
            rng=capture.rng,
            data=capture.data,
            step=capture.step,
            lease=opened.lease,
            location=opened.checkpoints_location,
            validation=validation,
            retention=self.context.retention if background else None,
            machines=self.context.machines.load,
            destination=opened.destination if background else None,
        )

    def _direct(self, capture: StepCapture, validation: ValidationState) -> SaveReport:
        """The direct object-store save (``checkpoint/direct``; imported only when the backend
        asks for it) into the root the direct resume opened."""
        from statecraft.checkpoint.direct.saving import (  # type: ignore[import-not-found,unused-ignore]
            save_direct_checkpoint,
        )

        if self.state.direct_root is None:
            raise CheckpointError(
                "checkpoint_store.backend=object_store: the direct root was not opened before "
                "the first save (Checkpointer.resume() opens it); call resume() first"
            )
        report: SaveReport = save_direct_checkpoint(
            self.state.tracked,
            self.state.direct_root,
            collective=self.context.collective,
            rng=capture.rng,
            data=capture.data,
            step=capture.step,
            lease=self.state.direct_lease,
            validation=validation,
        )
        return report

    def artifacts_root(self, opened: OpenAttempt) -> Store:
        """The ``checkpoint_artifacts`` root, created by the first artifact save (a reader
        never creates it)."""
        if self.state.artifacts_store is None:
            created = artifacts_store(opened.attempt, self.context.filesystem, create=True)
            assert created is not None  # an attempt is given
            self.state.artifacts_store = created
        return self.state.artifacts_store

    def artifact(
        self,
        opened: OpenAttempt,
        capture: StepCapture,
        *,
        plan: ComponentPlan,
        evaluation: Evaluation | None,
        evaluate_first: bool,
    ) -> ArtifactReport:
        """One partial artifact through ``machines/artifact.toml`` (rank 0); with an archive
        destination, once committed it is published (best effort: a failure is logged at
        WARNING and the local artifact is kept)."""
        artifacts = self.artifacts_root(opened)
        report = save_artifact(
            self.state.tracked,
            artifacts,
            plan=plan,
            rng=capture.rng,
            data=capture.data,
            step=capture.step,
            lease=opened.lease,
            machine=self.context.machines.load("artifact"),
            location=str(opened.attempt.artifacts_dir),
            evaluation=evaluation,
            evaluate_first=evaluate_first,
        )
        if opened.destination is not None:
            publish_committed_artifact(
                artifacts, capture.step, opened.destination, lease=opened.lease
            )
        return report

    def publication_steps(self, opened: OpenAttempt | None) -> tuple[PublicationStep, ...]:
        """The steps of a durable validation's publication: with an archive destination, the
        strict upload of the evaluated checkpoint (a failure raises: it stays
        publication-pending and a resumed run publishes it without evaluating again)."""
        destination = None if opened is None else opened.destination
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
        plan = self.context.retention
        machine = self.context.machines.load("retention")
        self.state.retained.append(
            run_retention(store, plan, saved_iteration=step, lease=lease, machine=machine)
        )
