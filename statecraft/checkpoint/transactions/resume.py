"""The effect bindings of the ``resume`` machine (``machines/resume.toml``).

``resume=auto`` considers every ``iter_*`` of the adopted attempt, newest first, and adopts the
first that verifies (manifest valid, every file's size and digest as recorded, ``trainer.pt``
well-formed and agreeing with the iteration); every newer one passed over is logged with its
reason. ``latest_checkpoint.txt`` names the newest committed iteration for outside readers;
resume does not trust it blindly: a pointer that is garbage or dangles is reported and
ignored, because the verified manifests are the ground truth. An explicit path must verify
or the resume fails; it never falls back and never trains from scratch.

What is on disk comes from the checkpoint catalog (:mod:`statecraft.checkpoint.catalog`);
verification from :mod:`statecraft.checkpoint.verify`; which files load into which tracked
object, and how, from the plan model (:mod:`statecraft.checkpoint.plan`).

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
from pathlib import Path

from statecraft.checkpoint.catalog import PassedOver, scan
from statecraft.checkpoint.layout import parse_iter_dirname
from statecraft.checkpoint.loading import load_all_or_nothing, read_components
from statecraft.checkpoint.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.state import (
    DataState,
    TrainerState,
    check_scheduler_identity,
    restore_rank_rng,
)
from statecraft.checkpoint.transactions.resume_records import ResumeContext, ResumeResult, Tracked
from statecraft.checkpoint.verify import VerifiedCheckpoint, list_iterations, verify_checkpoint
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, guard
from statecraft.errors import CheckpointCorruptError, ResumeError
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore

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
    """Scan the attempt's catalog: its iterations, newest first, and a note on a bad latest
    pointer."""
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
    if ctx.store is None:
        raise ResumeError("verify_next_candidate ran without a checkpoints store")
    catalog = ctx.catalog or scan(ctx.store, level=ctx.verify_level, writer=ctx.writer)
    entry = catalog.entry(iteration)
    unfit = _fit_problem(ctx, entry.verified) if entry.verified is not None else None
    if entry.state.adoptable and unfit is None:
        ctx.chosen = entry.verified
        return
    reason = unfit or entry.reason
    ctx.passed_over.append(PassedOver(entry.name, reason))
    log.warning("resume=auto passed over %s: %s", entry.name, reason)
    if not ctx.candidates:
        ctx.fresh_reason = (
            f"resume=auto found no checkpoint that verifies ({len(ctx.passed_over)} passed "
            "over): starting fresh"
        )
    if unfit is not None:
        raise ResumeError(unfit)
    raise entry.error or CheckpointCorruptError(
        f"{ctx.store.describe()}/{entry.name}", entry.state.value, "Resume from another one."
    )


def _resolve_explicit(path_text: str, fs: Filesystem) -> tuple[Store, int | None, str]:
    """The store, iteration (``None`` for a legacy ``.pt``) and name of an explicit path,
    resolved through ``fs``."""
    path = Path(path_text).expanduser().absolute()
    stat = fs.stat(str(path))
    if stat is not None and stat.is_dir:
        iteration = parse_iter_dirname(path.name)
        if iteration is None:
            raise ResumeError(
                f"resume={path_text}: a directory must be an iter_<9 digits> checkpoint directory"
                f" (got {path.name!r}); point resume at one, or use resume=auto"
            )
        return LocalStore(str(path.parent.resolve()), fs=fs), iteration, path.name
    if stat is not None and path.suffix == ".pt":
        return LocalStore(str(path.parent.resolve()), fs=fs), None, path.name
    raise ResumeError(
        f"resume={path_text}: no such checkpoint (expected an existing iter_<9 digits> directory "
        "or a legacy .pt file). Refusing to train from scratch; fix the path or use resume=auto"
    )


@effect(role=Role.COORDINATOR)
def verify_explicit(ctx: ResumeContext) -> None:
    """Verify the explicitly named checkpoint; any problem fails the resume (no fallback)."""

    def verify() -> VerifiedCheckpoint:
        store, iteration, name = _resolve_explicit(
            ctx.explicit or "", ctx.filesystem or OsFilesystem()
        )
        if iteration is not None:
            return verify_checkpoint(store, iteration, level=ctx.verify_level, writer=ctx.writer)
        payload = ctx.writer.read(store, name, mmap=False)
        if not isinstance(payload, dict) or "model" not in payload:
            raise CheckpointCorruptError(
                f"{store.describe()}/{name}",
                "is not a legacy checkpoint (expected a dict with a 'model' state dict)",
                "Point resume at an iter_* directory instead.",
            )
        if "trainer" not in payload:
            raise ResumeError(
                f"resume={ctx.explicit}: the legacy file has no trainer state, so its iteration "
                "cannot be derived; use it as model initialisation instead of exact resume"
            )
        trainer = TrainerState.from_payload(payload["trainer"], source=f"{store.describe()}/{name}")
        log.warning(
            "resume=%s is a legacy .pt without a manifest: integrity is not verified", ctx.explicit
        )
        return VerifiedCheckpoint(
            store, trainer.optimizer_step, f"{store.describe()}/{name}", trainer, None, payload
        )

    ctx.chosen = verify()


def _fit_problem(ctx: ResumeContext, chosen: VerifiedCheckpoint) -> str | None:
    """Why ``chosen`` verifies but cannot be this resume's source, or ``None``: the process
    tracks a data source under ``data.cursor_resume=strict`` and the checkpoint has no
    ``data.pt`` (a resume that requires the exact data cursor must not restart it)."""
    if ctx.tracked.data is None or ctx.cursor_resume != "strict":
        return None
    if chosen.legacy_payload is not None:
        has_data = chosen.legacy_payload.get("data") is not None
    else:
        has_data = chosen.manifest is not None and "data.pt" in chosen.manifest.files
    if has_data:
        return None
    return (
        f"{chosen.location}: data.cursor_resume=strict and a data source is tracked, but the "
        "checkpoint has no data.pt (its data cursor was not saved), so the data source would "
        "restart; resume from a checkpoint saved with the data source tracked, or set "
        "data.cursor_resume=auto to accept a non-exact data restart"
    )


@effect(role=Role.EVERY_RANK)
def load_checkpoint(ctx: ResumeContext) -> None:
    """Load the verified checkpoint into the tracked objects, all or nothing
    (:func:`~statecraft.checkpoint.loading.load_all_or_nothing`): identities are validated and
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
    problem = _fit_problem(ctx, chosen)
    if problem:
        raise ResumeError(problem)
    parts = read_components(chosen, ctx.writer, read_data=ctx.cursor_resume != "off")
    data_status = _data_status(ctx, chosen, parts.data)
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
    if ctx.passed_over:
        reason += f"; passed over {', '.join(p.name for p in ctx.passed_over)}"
    if ctx.verify_level != "digest" and chosen.manifest is not None:
        _note(
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
        data_status,
        tuple(ctx.notes),
        copy.deepcopy(trainer.extra),
    )
    log.info(reason)


def _note(ctx: ResumeContext, note: str) -> None:
    """Log ``note`` as a warning and return it in the result's notes."""
    log.warning(note)
    ctx.notes.append(note)


def _data_status(ctx: ResumeContext, chosen: VerifiedCheckpoint, state: DataState | None) -> str:
    """What will happen to this rank's data source (nothing is loaded here).

    Raises:
        ResumeError: ``data.cursor_resume=strict`` and ``data.pt`` was saved at another world
            size (refused before anything loads).
    """
    tracked = ctx.tracked
    if ctx.cursor_resume == "off":
        log.info("data.cursor_resume=off: the data source starts fresh (not exact)")
        return "off"
    if tracked.data is None:
        if state is not None:
            log.warning(
                "%s holds data source state but no data source is tracked; ignored", chosen.location
            )
        return "untracked"
    if state is None:  # strict was refused by _fit_problem before anything was read
        _note(
            ctx,
            f"{chosen.location} has no data.pt: the tracked data source restarts from its "
            "current position (not exact); set data.cursor_resume=strict to refuse such a "
            "checkpoint",
        )
        return "missing"
    world_size = ctx.collective.world_size
    if state.state_for(ctx.collective.rank, world_size) is None:
        where = f"{chosen.location}/{CHECKPOINT_PLAN.for_tracked('data').name}"
        if ctx.cursor_resume == "strict":
            raise ResumeError(
                f"{where} holds the data state of {state.describe_saver()} and this job runs "
                f"{world_size}: data.cursor_resume=strict requires each rank's own saved data "
                "cursor, so nothing was loaded. Relaunch with the same number of ranks "
                f"({state.world_size}), or set data.cursor_resume=auto to resume with the data "
                "sources restarted (not exact)",
                path=where,
                saved_world_size=state.world_size,
                world_size=world_size,
            )
        if ctx.collective.rank == 0:
            log.warning(
                "%s was saved by %s and this job has %d: no saved data state is this rank's "
                "own, so every data source keeps its fresh state (not exact); resume at the "
                "saving world size for the exact data cursor, or set data.cursor_resume=strict "
                "to refuse",
                where,
                state.describe_saver(),
                world_size,
            )
        ctx.notes.append(
            f"{where} was saved by {state.describe_saver()} and this job has {world_size}: "
            "the data sources keep their fresh state (not exact)"
        )
        return "topology_changed"
    return "restored"


@effect(role=Role.EVERY_RANK)
def start_fresh(ctx: ResumeContext) -> None:
    """No checkpoint is adopted: training starts at step 0."""
    reason = ctx.fresh_reason or "resume=off: starting fresh in a new attempt"
    ctx.result = ResumeResult(0, None, reason, tuple(ctx.passed_over), notes=tuple(ctx.notes))
    log.info("fresh start: %s", reason)


def resume_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
