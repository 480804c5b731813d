"""The effect bindings of the ``resume`` machine (``machines/resume.toml``).

``resume=auto`` considers every ``iter_*`` of the adopted attempt, newest first, and adopts the
first that verifies (manifest valid, every file's size and digest as recorded, ``trainer.pt``
well-formed and agreeing with the iteration); every newer one passed over is logged with its
reason. ``latest_checkpoint.txt`` names the newest committed iteration for outside readers;
resume does not trust it blindly: a pointer that is garbage or dangles is reported and
ignored, because the verified manifests are the ground truth. An explicit path must verify
or the resume fails; it never falls back and never trains from scratch
(:mod:`.resume_explicit`). An iteration retention marked (weights-only: its optimizer was
removed; invalidated: it is being deleted) is never adopted: ``resume=auto`` passes over it
with the reason, an explicit path to one is refused.

The attempt's partial artifacts (``checkpoint_artifacts/``) are never adopted, but the
checkpoint resumed must be at or beyond the newest one, and ``resume=auto`` refuses a fresh
start while one exists (:mod:`.resume_rules`, the same rules ``statecraft inspect`` shows).
A checkpoint saved under another validation identity is refused before anything loads. A
pending validation stage of the adopted checkpoint is reported in
:attr:`ResumeResult.validation_stage` (the facade then finishes it).

What is on disk comes from the checkpoint catalog (:mod:`statecraft.checkpoint.kernel.catalog`);
verification from :mod:`statecraft.checkpoint.kernel.verify`; which files load into which tracked
object, and how, from the plan model (:mod:`statecraft.checkpoint.kernel.plan`).

The direct object-store primary runs the same table over its root: the context then names a
:class:`~statecraft.checkpoint.resume.source.CheckpointSource` (a store plus a plan: the
candidates, how one verifies, how its components are read) and the coordinator steps of
:mod:`.sourced` take the place of the catalog's; the order, the refusals and the
all-or-nothing load are the table's.

Under ``torch.distributed`` every rank runs the machine in lock-step: the coordinator effects
(listing, verifying) run on rank 0 and their outcome and the context fields named in
:attr:`ResumeContext.coordinated` are broadcast
(:func:`~statecraft.parallel.coordinated.rank_zero_effects`); every rank loads the chosen
checkpoint.
"""

from __future__ import annotations

import copy
import logging
import sys

import attrs

from statecraft.checkpoint.kernel.artifact_catalog import scan_artifacts
from statecraft.checkpoint.kernel.catalog import CheckpointState, PassedOver, scan
from statecraft.checkpoint.kernel.identity_records import check_identity_records
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.loading import (
    load_all_or_nothing,
    read_components,
    read_dcp_components,
)
from statecraft.checkpoint.kernel.validation_records import check_validation_identity
from statecraft.checkpoint.kernel.verify import (
    VerifiedCheckpoint,
    list_iterations,
    verify_checkpoint,
)
from statecraft.checkpoint.resume.data import add_note, data_status, fit_problem
from statecraft.checkpoint.resume.explicit import verify_explicit_source
from statecraft.checkpoint.resume.records import ResumeContext, ResumeResult, Tracked
from statecraft.checkpoint.resume.rules import artifact_refusal
from statecraft.checkpoint.resume.sourced import (
    list_source_candidates,
    refuse_source_fresh_start,
    verify_source_candidate,
    verify_source_explicit,
)
from statecraft.checkpoint.state import (
    check_scheduler_identity,
    restore_rank_rng,
)
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, guard
from statecraft.errors import CheckpointCorruptError, ResumeError
from statecraft.storage.filesystem import OsFilesystem

__all__ = [
    "PassedOver",
    "ResumeContext",
    "ResumeResult",
    "Tracked",
    "VerifiedCheckpoint",
    "list_iterations",
    "resume_bindings",
    "verify_checkpoint",
]

log = logging.getLogger("statecraft.resume")


# ------------------------------------------------------------------------------ guards
@guard()
def resume_off(ctx: ResumeContext) -> bool:
    return ctx.mode == "off"


@guard()
def resume_explicit(ctx: ResumeContext) -> bool:
    return ctx.mode == "explicit"


@guard()
def resume_auto(ctx: ResumeContext) -> bool:
    return ctx.mode == "auto"


@guard()
def has_candidate(ctx: ResumeContext) -> bool:
    return bool(ctx.candidates)


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def list_candidates(ctx: ResumeContext) -> None:
    """Scan the attempt's catalog (its iterations, newest first, and a note on a bad latest
    pointer) and its artifacts."""
    _scan_artifacts(ctx)
    if ctx.source is not None:  # the direct object-store root (:mod:`.sourced`)
        list_source_candidates(ctx)
        return
    if ctx.store is None:
        iterations: list[int] = []
    else:
        ctx.catalog = scan(ctx.store, level=ctx.verify_level, writer=ctx.writer)
        iterations = list(ctx.catalog.iterations)
        note = ctx.catalog.latest.note
        if note:
            log.warning(note)
            ctx.notes.append(note)
    ctx.candidates = iterations
    if not iterations:
        ctx.fresh_reason = (
            "resume=auto found no checkpoint in this attempt: starting fresh"
            if ctx.store is not None
            else "resume=auto: new attempt, starting fresh"
        )


@effect(role=Role.COORDINATOR)
def verify_next_candidate(ctx: ResumeContext) -> None:
    """Verify the newest remaining candidate; on failure record why it was passed over.

    Raises:
        CheckpointCorruptError: the candidate does not verify (the table moves to the next).
    """
    iteration = ctx.candidates.pop(0)
    if ctx.source is not None:
        verify_source_candidate(ctx, iteration)
        return
    if ctx.store is None:
        raise ResumeError("verify_next_candidate ran without a checkpoints store")
    catalog = ctx.catalog or scan(ctx.store, level=ctx.verify_level, writer=ctx.writer)
    entry = catalog.entry(iteration)
    unfit = None  # a marked (weights-only) entry is passed over for its mark, not its fit
    if entry.state.adoptable and entry.verified is not None:
        unfit = fit_problem(ctx, entry.verified)
    if entry.state.adoptable and unfit is None:
        ctx.chosen = entry.verified
        ctx.chosen_stage = entry.state.validation_stage
        ctx.chosen_metrics = entry.metrics
        for note in entry.notes:
            add_note(ctx, note)
        return
    reason = unfit or entry.reason
    ctx.passed_over.append(PassedOver(entry.name, reason))
    log.warning("resume=auto passed over %s: %s", entry.name, reason)
    if not ctx.candidates:
        passed = {p.name for p in ctx.passed_over}
        pruned = sum(
            1
            for i in catalog.iterations
            if iter_dirname(i) in passed and catalog.entry(i).state is CheckpointState.WEIGHTS_ONLY
        )
        which = (
            f", {pruned} of them weights-only (optimizer removed by retention)" if pruned else ""
        )
        ctx.fresh_reason = (
            f"resume=auto found no checkpoint that verifies ({len(ctx.passed_over)} passed "
            f"over{which}): starting fresh"
        )
    if unfit is not None:
        raise ResumeError(unfit)
    raise entry.error or CheckpointCorruptError(
        f"{ctx.store.describe()}/{entry.name}", entry.state.value, "Resume from another one."
    )


def _scan_artifacts(ctx: ResumeContext) -> None:
    """Find the attempt's newest artifact with a manifest (manifests only: a damaged one
    still counts), once."""
    if not ctx.artifacts_scanned:
        newest = scan_artifacts(ctx.artifacts, level="manifest").newest_with_manifest()
        ctx.newest_artifact = newest.light() if newest is not None else None
        ctx.artifacts_scanned = True


@effect(role=Role.COORDINATOR)
def verify_explicit(ctx: ResumeContext) -> None:
    """Verify the explicitly named checkpoint (:mod:`.resume_explicit`); any problem fails
    the resume (no fallback). An artifact path is refused before anything is read.

    Raises:
        ArtifactResumeError: the path is a partial artifact, or a legacy file with no
            derivable iteration while the attempt holds an artifact.
        ResumeError / CheckpointCorruptError / TrainerStateError: it does not resolve or
            verify.
    """
    _scan_artifacts(ctx)
    if ctx.source is not None:
        verify_source_explicit(ctx)
        return
    chosen, reading = verify_explicit_source(
        ctx.explicit or "",
        fs=ctx.filesystem or OsFilesystem(),
        writer=ctx.writer,
        level=ctx.verify_level,
        newest_artifact=ctx.newest_artifact,
    )
    ctx.chosen = chosen
    ctx.chosen_stage = reading.stage
    ctx.chosen_metrics = reading.metrics
    for note in reading.notes:
        add_note(ctx, note)


@effect(role=Role.COORDINATOR)
def require_no_artifacts(ctx: ResumeContext) -> None:
    """``resume=auto`` found nothing to adopt: refuse a fresh start while the attempt holds
    an artifact with a manifest (:func:`~.resume_rules.artifact_refusal`).

    Raises:
        ArtifactResumeError: naming the artifact, "no resumable checkpoint" and the fixes.
    """
    _scan_artifacts(ctx)
    refusal = artifact_refusal(
        ctx.newest_artifact, source="resume=auto", checkpoint=None, iteration=None
    )
    if refusal is not None:
        raise refusal
    if ctx.source is not None:  # e.g. latest names an iteration that did not verify
        refuse_source_fresh_start(ctx)


@effect(role=Role.COORDINATOR)
def require_admissible(ctx: ResumeContext) -> None:
    """The verified checkpoint may be this run's source: at or beyond the attempt's newest
    artifact, and saved under this run's validation identity (when the context names one).
    Checked before anything loads; then rank 0 waits for what must be durable first
    (:attr:`ResumeContext.before_load`: the writer lease's record).

    Raises:
        ArtifactResumeError: the checkpoint is older than the newest artifact.
        ValidationIdentityError: its recorded validation identity differs from this run's.
        WriterLeaseError / StoreError: the lease record could not be published.
    """
    chosen = ctx.chosen
    if chosen is None:
        raise ResumeError("require_admissible ran without a verified checkpoint")
    _scan_artifacts(ctx)
    source = "resume=auto" if ctx.mode == "auto" else f"resume={ctx.explicit}"
    refusal = artifact_refusal(
        ctx.newest_artifact, source=source, checkpoint=chosen.location, iteration=chosen.iteration
    )
    if refusal is not None:
        raise refusal
    if ctx.validation_identity is not None:
        check_validation_identity(
            chosen.trainer.validation if chosen.trainer is not None else None,
            ctx.validation_identity,
            source=f"{chosen.location}/trainer.pt",
        )
    if ctx.before_load is not None:
        ctx.before_load()


@effect(role=Role.EVERY_RANK)
def load_checkpoint(ctx: ResumeContext) -> None:
    """Load the verified checkpoint into the tracked objects, all or nothing
    (:func:`~statecraft.checkpoint.kernel.loading.load_all_or_nothing`): identities are validated
    and
    every component is read and checked against its live object before any object changes, and
    a failure leaves every tracked object as it was.

    Raises:
        TrainerStateError: the scheduler identity differs (checked before anything is loaded).
        ResumeError: a tracked object has no saved state, saved state has no target or does
            not fit it (keys, shapes, parameter groups, stateful names), ``data.pt`` was saved
            at another world size under ``data.cursor_resume=strict``, or an object's own load
            failed.
        CheckpointCorruptError: a component file is not a loadable ``torch.save`` archive.
    """
    chosen = ctx.chosen
    if chosen is None:
        raise ResumeError("load_checkpoint ran without a verified checkpoint")
    tracked = ctx.tracked
    trainer = chosen.trainer
    if trainer is None:
        raise ResumeError(f"{chosen.location}: verified without its trainer state")
    check_scheduler_identity(
        trainer.scheduler_identity,
        tracked.scheduler_identity,
        source=f"{chosen.location}/trainer.pt",
    )
    check_identity_records(tracked, trainer, location=chosen.location)  # model_roles: copies
    if tracked.scheduler is not None and trainer.scheduler_state is None:
        raise ResumeError(
            f"{chosen.location}: a scheduler is tracked but the checkpoint saved none; exact "
            "resume would restart its schedule. Track the same objects as the saving run"
        )
    if tracked.scheduler is None and trainer.scheduler_state is not None:
        raise ResumeError(
            f"{chosen.location}: the checkpoint saved scheduler state but no scheduler is "
            "tracked; pass scheduler= to Checkpointer.track()"
        )
    problem = fit_problem(ctx, chosen)
    if problem:
        raise ResumeError(problem)
    read_data = ctx.cursor_resume != "off"
    if not isinstance(chosen, VerifiedCheckpoint):  # a source's: read through the source
        if ctx.source is None:
            raise ResumeError(f"{chosen.location}: verified by a source the context lacks")
        parts = ctx.source.read_components(chosen, tracked, read_data=read_data)
    elif chosen.manifest is not None and chosen.manifest.format == "dcp":
        # every rank loads the items its live objects need into scratch targets (resharding
        # through DCP's load planner); nothing live changes until load_all_or_nothing applies
        parts = read_dcp_components(chosen, tracked, trainer, ctx.writer, read_data=read_data)
    else:
        parts = read_components(chosen, ctx.writer, read_data=read_data)
    data_outcome = data_status(ctx, chosen, parts.data)
    if data_outcome != "restored":  # the data source keeps its fresh state
        parts = attrs.evolve(parts, data=None)
    rng_status = load_all_or_nothing(
        tracked,
        trainer,
        parts,
        location=chosen.location,
        rank=ctx.collective.rank,
        world_size=ctx.collective.world_size,
        log=log,
        restore_rng=restore_rank_rng,
    )
    reason = f"resumed from {chosen.location} (iter {chosen.iteration})"
    if ctx.chosen_stage.value != "none":
        reason += f", validation {ctx.chosen_stage.value.replace('_', '-')}"
    if ctx.passed_over:
        reason += f"; passed over {', '.join(p.name for p in ctx.passed_over)}"
    digests_skipped = isinstance(chosen, VerifiedCheckpoint) and chosen.manifest is not None
    if ctx.verify_level != "digest" and digests_skipped:
        add_note(
            ctx,
            f"verify={ctx.verify_level}: file sizes were checked but not content digests, so "
            "silent corruption of same-sized bytes would not be detected",
        )
    ctx.result = ResumeResult(
        chosen.iteration,
        chosen.location,
        reason,
        tuple(ctx.passed_over),
        rng_status,
        data_outcome,
        tuple(ctx.notes),
        copy.deepcopy(trainer.extra),
        ctx.chosen_stage,
        dict(ctx.chosen_metrics) if ctx.chosen_metrics is not None else None,
    )
    log.info(reason)


@effect(role=Role.EVERY_RANK)
def start_fresh(ctx: ResumeContext) -> None:
    """No checkpoint is adopted: training starts at step 0."""
    reason = ctx.fresh_reason or "resume=off: starting fresh in a new attempt"
    ctx.result = ResumeResult(0, None, reason, tuple(ctx.passed_over), notes=tuple(ctx.notes))
    log.info("fresh start: %s", reason)


def resume_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
