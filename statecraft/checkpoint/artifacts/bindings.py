"""The effect bindings of the ``artifact`` machine (``machines/artifact.toml``).

A partial artifact is a proper subset of the full plan (:class:`~statecraft.checkpoint.
components.ComponentPlan`) written under ``checkpoint_artifacts/iter_<9 digits>/``. The table is
the order: (optional) evaluate first -> stage (capture every payload) -> prepare the directory
-> write every file durably -> commit ``.posttrain-checkpoint-artifact.json`` last by exclusive
create -> (optional) the ephemeral evaluation after the commit. This module says *how* each
step acts on the ``checkpoint_artifacts`` store; it never decides the order, and it never sees
``checkpoints/`` (its store is rooted beside it). See ``specs/artifact.toml``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft.checkpoint.fencing.fenced_store import FencedStore, discard_own_leftovers
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.artifact_manifest import (
    ARTIFACT_MANIFEST_SCHEMA,
    ArtifactManifest,
    read_artifact_manifest,
)
from statecraft.checkpoint.kernel.commit import (
    create_manifest_last,
    fence_unit,
    prepare_unit,
    require_staged,
    require_written,
    write_durably,
)
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.evaluation import Evaluation, run_evaluation
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.manifest import FileEntry, SavePlan
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, guard, observer
from statecraft.errors import (
    ArtifactCommittedError,
    CheckpointCorruptError,
    CheckpointError,
    StoreError,
)
from statecraft.storage.base import FileRecord, Store
from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = ["ArtifactContext", "artifact_bindings"]

log = logging.getLogger("statecraft.artifact")
_FORMAT = "consolidated"


@attrs.define
class ArtifactContext:
    """One artifact save.

    Attributes:
        store: the ``checkpoint_artifacts`` root (``.../<RUN_TS>/checkpoint_artifacts``).
        plan: the logical components; never the full plan (that is a checkpoint).
        iteration: the step the artifact belongs to.
        payloads: file name -> zero-argument producer, exactly for :attr:`files`; each is
            called once, by ``stage_payloads``, before any write.
        with_data: a data source is tracked (``data.pt`` belongs to ``training_state``).
        evaluation: the loop's evaluation, or ``None`` (no validation at this step).
        evaluate_first: the artifact is requested by validation alone: evaluate before
            anything is written and commit only after success (the metrics go into the
            manifest). Otherwise a registered ``evaluation`` runs after the commit
            (ephemeral: its failure leaves the artifact committed).
        step: the step handed to the evaluation (default: ``iteration``).
        writer: serializes the payloads (a :class:`Writer`, one per save); ``writer_info``
            adds fields to the manifest's ``writer``.
        staged: the captured payloads, filled by ``stage_payloads``; ``records``: size and
            digest of each file written, filled as files land.
        commit_conflict: another writer's commit or lease was in the way (its files are
            kept when the save abandons).
        metrics: what the evaluation returned (``None`` until it ran).
        evaluated: the evaluation ran and succeeded.
        observed_problem: why ``observe_artifact`` found the iteration corrupt or foreign.
        lease: this process's writer lease, checked before every publication and removal
            (``None``: the crash harness's single writer, tools).

    Raises:
        CheckpointError: the plan is full, or the payloads do not match its files.
    """

    store: Store
    plan: ComponentPlan
    iteration: int
    payloads: Mapping[str, Callable[[], Any]]
    with_data: bool = False
    evaluation: Evaluation | None = None
    evaluate_first: bool = False
    step: int | None = None
    writer: Writer = attrs.field(factory=ConsolidatedWriter)
    writer_info: dict[str, str] = attrs.field(factory=dict)
    staged: dict[str, Any] = attrs.field(factory=dict)
    records: dict[str, FileRecord] = attrs.field(factory=dict)
    metrics: dict[str, float] | None = None
    evaluated: bool = False
    commit_conflict: bool = False
    observed_problem: str = ""
    lease: WriterLease | None = None

    def __attrs_post_init__(self) -> None:
        if self.plan.is_full:
            raise CheckpointError(
                f"artifact save of iteration {self.iteration}: the plan {self.plan} is the full "
                "plan, which is a checkpoint under checkpoints/; save it with the save machine"
            )
        if sorted(self.payloads) != sorted(self.files):
            raise CheckpointError(
                f"artifact plan {self.plan} writes {list(self.files)}; got payloads for "
                f"{sorted(self.payloads)}"
            )
        if self.evaluate_first and self.evaluation is None:
            raise CheckpointError(
                f"artifact save of iteration {self.iteration}: evaluate_first needs an "
                "evaluation; register one with Checkpointer.validate_with(evaluate)"
            )
        if not isinstance(self.writer, Writer):
            raise CheckpointError(
                f"ArtifactContext.writer must implement statecraft.writers.Writer, got "
                f"{type(self.writer).__name__}"
            )

    @property
    def files(self) -> tuple[str, ...]:
        return self.plan.files(with_data=self.with_data)

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    def path(self, name: str) -> str:
        return f"{self.iter_dir}/{name}"

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{self.iter_dir}"

    @property
    def fenced(self) -> FencedStore:
        """The store every write effect acts through (each publication and removal first
        passes :func:`fence`)."""
        return FencedStore(self.store, lambda path: fence(self, path))


def fence(ctx: ArtifactContext, path: str) -> None:
    """Refuse a publication or removal of ``path`` when the lease is no longer ours, or when
    it would write into (or remove from) an iteration that holds an artifact manifest.

    Raises:
        WriterLeaseError: the lease was taken over (or is gone).
        IterationCommittedError: the artifact was committed by someone else meanwhile.
    """
    fence_unit(
        ctx,
        path,
        manifest_name=ARTIFACT_MANIFEST_NAME,
        holds="an artifact manifest",
        unit="a committed artifact",
    )


# ------------------------------------------------------------------------------ guards
@guard()
def evaluate_first(ctx: ArtifactContext) -> bool:
    """Validation alone asked for this artifact: evaluate, and commit only after success."""
    return ctx.evaluation is not None and ctx.evaluate_first


@guard()
def evaluate_after(ctx: ArtifactContext) -> bool:
    """A cadence artifact with validation due at the same step: evaluate after the commit."""
    return ctx.evaluation is not None and not ctx.evaluate_first


# ----------------------------------------------------------------------------- observe
@observer()
def observe_artifact(ctx: ArtifactContext) -> str:
    """Classify ``checkpoint_artifacts/iter_N`` (the table's ``[recover]`` keys): ``absent``,
    ``partial``, ``committed``, ``corrupt`` (the manifest does not decode) or ``foreign``
    (a full-checkpoint manifest inside). Reads only."""
    if ctx.store.stat(ctx.iter_dir) is None:
        return "absent"
    if ctx.store.stat(ctx.path(MANIFEST_NAME)) is not None:
        ctx.observed_problem = (
            f"an artifact directory holding a full-checkpoint manifest ({MANIFEST_NAME}); "
            "a full checkpoint lives under checkpoints/, never under checkpoint_artifacts/"
        )
        return "foreign"
    if ctx.store.stat(ctx.path(ARTIFACT_MANIFEST_NAME)) is None:
        return "partial"
    try:
        read_artifact_manifest(ctx.store, ctx.iteration)
    except (CheckpointCorruptError, OSError) as exc:
        ctx.observed_problem = str(exc)
        return "corrupt"
    return "committed"


# ----------------------------------------------------------------------------- effects
def _evaluate(ctx: ArtifactContext) -> None:
    if ctx.evaluation is None:  # pragma: no cover - the guards route around it
        raise CheckpointError(f"{ctx.iter_dir}: an evaluation effect ran without an evaluation")
    step = ctx.iteration if ctx.step is None else ctx.step
    ctx.metrics = run_evaluation(ctx.evaluation, step)
    ctx.evaluated = True


@effect(role=Role.COORDINATOR)
def evaluate_before_commit(ctx: ArtifactContext) -> None:
    """Run the evaluation before anything is written (no store operation). A failure
    (:class:`~statecraft.errors.ValidationFailedError`) ends the save with nothing written."""
    _evaluate(ctx)


@effect(role=Role.COORDINATOR)
def stage_payloads(ctx: ArtifactContext) -> None:
    """Capture every payload of the plan (call each producer once); no store operation."""
    ctx.staged = {name: ctx.payloads[name]() for name in ctx.files}


@effect(role=Role.COORDINATOR)
def prepare_artifact(ctx: ArtifactContext) -> None:
    """Clear uncommitted leftovers of this iteration (never used), create its directory and
    prepare the writer."""
    # The root may have been created by a process that died before its entry was durable
    # (a store that finds its root existing does not fsync it again): settle it first.
    ctx.store.make_durable("")
    store = ctx.fenced
    prepare_unit(ctx, store, label=f"artifact {ctx.iter_dir}", logger=log)
    ctx.writer.prepare(SavePlan(ctx.iteration, _FORMAT, ctx.plan.components, ctx.files), store)


@effect(role=Role.COORDINATOR)
def write_files(ctx: ArtifactContext) -> None:
    """Write every file of the plan in plan order (bulk entries before control entries)."""
    require_staged(ctx.staged, ctx.files, iter_dir=ctx.iter_dir, table="artifact")
    names = [e.name for e in CHECKPOINT_PLAN if e.name in ctx.files]
    write_durably(ctx.writer, ctx.fenced, ctx, names, ctx.staged, ctx.records)


@effect(role=Role.COORDINATOR)
def commit_manifest(ctx: ArtifactContext) -> None:
    """Publish the artifact manifest by exclusive create (after every file is written; the
    create first settles them). Metrics are recorded only when the evaluation ran first."""
    require_written(
        sorted(ctx.files), ctx.records, where=ctx.where, retry="Retry the artifact save."
    )
    manifest = ArtifactManifest(
        schema=ARTIFACT_MANIFEST_SCHEMA,
        iteration=ctx.iteration,
        format=_FORMAT,
        components=ctx.plan.components,
        physical=ctx.plan.physical,
        files={n: FileEntry(r.size, r.digest) for n, r in sorted(ctx.records.items())},
        metrics=dict(ctx.metrics) if ctx.evaluate_first and ctx.metrics is not None else None,
        writer={**ctx.writer.finish(), **ctx.writer_info},
    )
    create_manifest_last(ctx.fenced, ctx.path(ARTIFACT_MANIFEST_NAME), manifest.encode(), flag=ctx)


@effect(role=Role.COORDINATOR)
def evaluate_after_commit(ctx: ArtifactContext) -> None:
    """The ephemeral evaluation of a committed cadence artifact (no store operation). A
    failure raises :class:`~statecraft.errors.ValidationFailedError`; the artifact stays."""
    _evaluate(ctx)


@effect(role=Role.COORDINATOR)
def refuse_committed(ctx: ArtifactContext) -> None:
    """The iteration already holds a committed artifact: refuse before any writer runs.

    The only store operations are fsyncs of the committed directory (a killed process may
    have left the commit in the page cache); no name or byte changes, not even the removal of
    a writer temporary a killed commit left beside the manifest.

    Raises:
        ArtifactCommittedError: always.
    """
    message = (
        f"{ctx.where} is already a committed artifact: a committed artifact is never "
        f"re-committed and this save of iteration {ctx.iteration} wrote nothing. Nothing to do "
        "(it is complete); to save again, move the directory aside first"
    )
    try:
        ctx.store.make_durable(ctx.iter_dir)
    except (OSError, StoreError) as exc:
        raise ArtifactCommittedError(
            f"{message} (making it durable failed too: {exc}; a power loss may still take it)",
            path=ctx.where,
            iteration=ctx.iteration,
        ) from exc
    raise ArtifactCommittedError(message, path=ctx.where, iteration=ctx.iteration)


@effect(role=Role.COORDINATOR)
def refuse_corrupt(ctx: ArtifactContext) -> None:
    """The iteration holds an unreadable artifact manifest or a full-checkpoint manifest:
    refuse to touch it.

    Raises:
        CheckpointCorruptError: always, naming the directory and the problem.
    """
    raise CheckpointCorruptError(
        ctx.where,
        ctx.observed_problem or "the artifact directory changed while saving",
        "Nothing was written; move the directory aside (it is never a resume source) and "
        "save again.",
    )


@effect(role=Role.COORDINATOR)
def discard_partial(ctx: ArtifactContext) -> None:
    """After a failed write: remove this iteration's files (including a manifest this save
    published itself, which a failed fsync may never make durable). Kept only when another
    writer's commit or lease is in the way."""
    discard_own_leftovers(
        ctx.store,
        ctx.iter_dir,
        conflict=ctx.commit_conflict,
        lease=ctx.lease,
        label=f"artifact {ctx.iter_dir}",
    )


def artifact_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
