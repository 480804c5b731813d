"""The effect bindings of the ``resume`` machine (``machines/resume.toml``), and checkpoint
verification shared with ``statecraft inspect``.

``resume=auto`` considers every ``iter_*`` of the adopted attempt, newest first, and adopts the
first that verifies (manifest valid, every file's size and SHA-256 as recorded, ``trainer.pt``
well-formed and agreeing with the iteration); every newer one passed over is logged with its
reason. ``latest_checkpoint.txt`` names the newest committed iteration for outside readers;
resume does not trust it blindly: a pointer that is garbage or dangles is reported and
ignored, because the verified manifests are the ground truth. An explicit path must verify
or the resume fails; it never falls back and never trains from scratch.

Under ``torch.distributed`` every rank runs the machine in lock-step: rank 0 lists and verifies,
each decision is broadcast, and every rank loads the chosen checkpoint.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.layout import (
    LATEST_POINTER,
    MANIFEST_NAME,
    iter_dirname,
    parse_iter_dirname,
    parse_latest,
)
from statecraft.checkpoint.manifest import Manifest
from statecraft.checkpoint.state import (
    TrainerState,
    UpdateClocks,
    check_scheduler_identity,
    restore_rank_rng,
)
from statecraft.checkpoint.transactions.save import FULL_COMPONENTS, read_manifest
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, guard
from statecraft.errors import CheckpointCorruptError, CheckpointError, ResumeError
from statecraft.parallel.collectives import Collective, SingleProcess
from statecraft.storage.base import Store
from statecraft.storage.digest import file_digest
from statecraft.storage.local import LocalStore
from statecraft.writers.consolidated import ConsolidatedWriter

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


@attrs.frozen
class PassedOver:
    """A candidate resume did not adopt, and why."""

    name: str
    reason: str


@attrs.frozen
class VerifiedCheckpoint:
    """A checkpoint whose integrity was proven; ``trainer`` is its parsed control state."""

    store: Store
    iteration: int
    location: str
    trainer: TrainerState
    manifest: Manifest | None = None
    legacy_payload: dict[str, Any] | None = None

    def path(self, name: str) -> str:
        return f"{iter_dirname(self.iteration)}/{name}"


@attrs.frozen
class ResumeResult:
    """Where training starts.

    Attributes:
        step: the optimizer step to continue from (0 for a fresh start).
        source: the checkpoint loaded, or ``None`` for a fresh start.
        reason: one line saying why (also logged).
        passed_over: newer candidates that were not adopted, each with its reason.
        rng: ``"restored"``, ``"missing"``, ``"topology_changed"`` or ``"fresh"``.
        data: what happened to the data source (``"restored"``, ``"fresh"``, ...).
        notes: warnings about the choice (an unreadable or dangling latest pointer, digests
            not verified); each was also logged.
    """

    step: int
    source: str | None
    reason: str
    passed_over: tuple[PassedOver, ...] = ()
    rng: str = "fresh"
    data: str = "fresh"
    notes: tuple[str, ...] = ()

    @property
    def resumed(self) -> bool:
        return self.source is not None


@attrs.define
class Tracked:
    """The live training objects a resume loads into (registered with ``Checkpointer.track``)."""

    model: Any = None
    optimizer: Any = None
    scheduler: Any = None
    data: Any = None
    scheduler_identity: Any = None
    clocks: UpdateClocks = attrs.field(factory=UpdateClocks)


def list_iterations(store: Store) -> list[int]:
    """Iterations with an ``iter_*`` directory in ``store``, newest first."""
    found = (parse_iter_dirname(n) for n in store.list(""))
    return sorted((i for i in found if i is not None), reverse=True)


def verify_checkpoint(
    store: Store, iteration: int, *, level: str = "digest", writer: ConsolidatedWriter | None = None
) -> VerifiedCheckpoint:
    """Prove that ``iteration`` in ``store`` is a complete, intact, exact-resume checkpoint.

    Checks: the manifest parses and names this iteration with the full plan; every recorded
    file exists with its size and (``level="digest"``) its SHA-256; ``trainer.pt`` loads with
    ``weights_only=True`` and is well-formed; its ``optimizer_step`` equals the iteration.

    Raises:
        CheckpointCorruptError: the first problem found, naming the file and what to do.
        TrainerStateError: ``trainer.pt`` is malformed or its clocks conflict.
    """
    writer = writer or ConsolidatedWriter()
    name = iter_dirname(iteration)
    where = f"{store.describe()}/{name}"
    if store.stat(f"{name}/{MANIFEST_NAME}") is None:
        raise CheckpointCorruptError(
            where, "has no manifest (an interrupted save)", "It is never adopted; nothing to do."
        )
    manifest = read_manifest(store, iteration)
    if tuple(manifest.components) != FULL_COMPONENTS or "trainer.pt" not in manifest.files:
        raise CheckpointCorruptError(
            where,
            f"plan {list(manifest.components)} is not the full exact-resume plan",
            "Use it as model initialisation, not as a resume source.",
        )
    for file_name, entry in sorted(manifest.files.items()):
        path = f"{name}/{file_name}"
        stat = store.stat(path)
        if stat is None:
            raise CheckpointCorruptError(
                f"{store.describe()}/{path}",
                "is missing",
                "The checkpoint is incomplete; resume from another one.",
            )
        if stat.size != entry.size:
            raise CheckpointCorruptError(
                f"{store.describe()}/{path}",
                f"has {stat.size} bytes, the manifest recorded {entry.size} "
                "(truncated or replaced)",
                "Resume from another checkpoint.",
            )
        if level == "digest":
            digest = file_digest(store, path, entry.digest.algorithm)
            if digest != entry.digest:
                raise CheckpointCorruptError(
                    f"{store.describe()}/{path}",
                    f"digest {digest.algorithm} {digest.value[:16]}... does not match the "
                    f"manifest's {entry.digest.value[:16]}... "
                    "(the bytes changed after the save)",
                    "Resume from another checkpoint.",
                )
    payload = writer.read(store, f"{name}/trainer.pt", mmap=False)
    trainer = TrainerState.from_payload(payload, source=f"{where}/trainer.pt")
    if trainer.optimizer_step != iteration:
        raise CheckpointCorruptError(
            f"{where}/trainer.pt",
            f"records optimizer_step {trainer.optimizer_step} but lives in {name} "
            "(conflicting clocks)",
            "Resume from another checkpoint.",
        )
    return VerifiedCheckpoint(store, iteration, where, trainer, manifest)


@attrs.define
class ResumeContext:
    """One resume decision and load.

    Attributes:
        mode: ``"auto"``, ``"off"`` or ``"explicit"``.
        store: the adopted attempt's checkpoints root (``None`` when the attempt is new).
        explicit: the explicit path (``mode == "explicit"``).
        tracked: the objects to load into.
        verify_level: ``"digest"`` or ``"size"``.
        cursor_resume: ``data.cursor_resume`` (``auto`` / ``strict`` / ``off``).
    """

    mode: str
    tracked: Tracked
    store: Store | None = None
    explicit: str | None = None
    verify_level: str = "digest"
    cursor_resume: str = "auto"
    collective: Collective = attrs.field(factory=SingleProcess)
    writer: ConsolidatedWriter = attrs.field(factory=ConsolidatedWriter)
    candidates: list[int] = attrs.field(factory=list)
    passed_over: list[PassedOver] = attrs.field(factory=list)
    chosen: VerifiedCheckpoint | None = None
    result: ResumeResult | None = None
    fresh_reason: str = ""
    notes: list[str] = attrs.field(factory=list)


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
def _on_rank_zero(ctx: ResumeContext, fn: Any) -> Any:
    """Run ``fn`` on rank 0 and broadcast its value or its error to every rank."""
    value: Any = None
    if ctx.collective.rank == 0:
        try:
            value = ("ok", fn())
        except Exception as exc:  # every rank must learn of the failure, not hang
            value = ("error", exc)
    status, value = ctx.collective.broadcast(value)
    if status == "error":
        raise value
    return value


@effect(role=Role.COORDINATOR)
def list_candidates(ctx: ResumeContext) -> None:
    """Collect the attempt's iterations, newest first, and note a bad latest pointer."""

    def scan() -> tuple[list[int], str | None]:
        if ctx.store is None:
            return [], None
        iterations = list_iterations(ctx.store)
        note = None
        if ctx.store.stat(LATEST_POINTER) is not None:
            try:
                latest = parse_latest(ctx.store.read_bytes(LATEST_POINTER))
            except ValueError as exc:
                note = (
                    f"{ctx.store.describe()}/{LATEST_POINTER} is unreadable ({exc}); "
                    "ignoring it and selecting by verified manifests"
                )
            else:
                if latest not in iterations:
                    note = (
                        f"{ctx.store.describe()}/{LATEST_POINTER} names {iter_dirname(latest)}, "
                        "which does not exist; ignoring it and selecting by verified manifests"
                    )
        return iterations, note

    iterations, note = _on_rank_zero(ctx, scan)
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
    """Verify the newest remaining candidate; on failure record why it was passed over."""
    iteration = ctx.candidates.pop(0)
    store = ctx.store
    if store is None:
        raise ResumeError("verify_next_candidate ran without a checkpoints store")
    try:
        ctx.chosen = _on_rank_zero(
            ctx,
            lambda: verify_checkpoint(store, iteration, level=ctx.verify_level, writer=ctx.writer),
        )
    except Exception as exc:  # anything that fails verification is passed over, with why
        reason = str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"
        ctx.passed_over.append(PassedOver(iter_dirname(iteration), reason))
        log.warning("resume=auto passed over %s: %s", iter_dirname(iteration), reason)
        if not ctx.candidates:
            ctx.fresh_reason = (
                f"resume=auto found no checkpoint that verifies ({len(ctx.passed_over)} passed "
                "over): starting fresh"
            )
        raise


def _resolve_explicit(path_text: str) -> tuple[Store, int | None, str]:
    path = Path(path_text).expanduser()
    if path.is_dir():
        iteration = parse_iter_dirname(path.name)
        if iteration is None:
            raise ResumeError(
                f"resume={path_text}: a directory must be an iter_<9 digits> checkpoint directory"
                f" (got {path.name!r}); point resume at one, or use resume=auto"
            )
        return LocalStore(str(path.parent.resolve())), iteration, path.name
    if path.is_file() and path.suffix == ".pt":
        return LocalStore(str(path.parent.resolve())), None, path.name
    raise ResumeError(
        f"resume={path_text}: no such checkpoint (expected an existing iter_<9 digits> directory "
        "or a legacy .pt file). Refusing to train from scratch; fix the path or use resume=auto"
    )


@effect(role=Role.COORDINATOR)
def verify_explicit(ctx: ResumeContext) -> None:
    """Verify the explicitly named checkpoint; any problem fails the resume (no fallback)."""

    def verify() -> VerifiedCheckpoint:
        store, iteration, name = _resolve_explicit(ctx.explicit or "")
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

    ctx.chosen = _on_rank_zero(ctx, verify)


def _component(
    ctx: ResumeContext, chosen: VerifiedCheckpoint, key: str, file_name: str, *, mmap: bool
) -> Any:
    """A component's payload. ``mmap=True`` only for state that is *copied* into live tensors
    (the model): an optimizer keeps the loaded tensors as its state, and a mapping would pin
    the checkpoint file (and its disk space) for the rest of the run."""
    if chosen.legacy_payload is not None:
        return chosen.legacy_payload.get(key)
    if file_name not in (chosen.manifest.files if chosen.manifest else {}):
        return None
    return ctx.writer.read(chosen.store, chosen.path(file_name), mmap=mmap)


@effect(role=Role.EVERY_RANK)
def load_checkpoint(ctx: ResumeContext) -> None:
    """Load the verified checkpoint into the tracked objects, validating identities first.

    Raises:
        TrainerStateError: the scheduler identity differs (checked before anything is loaded).
        ResumeError: a tracked object has no saved state, or saved state has no target.
    """
    chosen = ctx.chosen
    if chosen is None:
        raise ResumeError("load_checkpoint ran without a verified checkpoint")
    tracked = ctx.tracked
    trainer = chosen.trainer
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
    model_state = _component(ctx, chosen, "model", "model.pt", mmap=True)
    optim_state = _component(ctx, chosen, "optimizer", "optim.pt", mmap=False)
    if tracked.model is not None:
        tracked.model.load_state_dict(model_state)
    if tracked.optimizer is not None:
        if optim_state is None:
            raise ResumeError(
                f"{chosen.location}: no optimizer state to load into the tracked optimizer"
            )
        tracked.optimizer.load_state_dict(optim_state)
    if tracked.scheduler is not None:
        tracked.scheduler.load_state_dict(trainer.scheduler_state)
    data_status = _load_data(ctx, chosen)
    rng_status = restore_rank_rng(
        trainer.rng, rank=ctx.collective.rank, world_size=ctx.collective.world_size, log=log
    )
    tracked.clocks = trainer.to_clocks()
    reason = f"resumed from {chosen.location} (iter {chosen.iteration})"
    if ctx.passed_over:
        reason += f"; passed over {', '.join(p.name for p in ctx.passed_over)}"
    if ctx.verify_level != "digest" and chosen.manifest is not None:
        note = (
            f"verify={ctx.verify_level}: file sizes were checked but not SHA-256 digests, so "
            "silent corruption of same-sized bytes would not be detected"
        )
        log.warning(note)
        ctx.notes.append(note)
    ctx.result = ResumeResult(
        chosen.iteration,
        chosen.location,
        reason,
        tuple(ctx.passed_over),
        str(rng_status),
        data_status,
        tuple(ctx.notes),
    )
    log.info(reason)


def _load_data(ctx: ResumeContext, chosen: VerifiedCheckpoint) -> str:
    tracked = ctx.tracked
    if ctx.cursor_resume == "off":
        log.info("data.cursor_resume=off: the data source starts fresh (not exact)")
        return "off"
    state = _component(ctx, chosen, "data", "data.pt", mmap=False)
    if tracked.data is None:
        if state is not None:
            log.warning(
                "%s holds data source state but no data source is tracked; ignored", chosen.location
            )
        return "untracked"
    if state is None:
        if ctx.cursor_resume == "strict":
            raise ResumeError(
                f"{chosen.location}: data.cursor_resume=strict but the checkpoint has no data.pt"
            )
        log.warning(
            "%s has no data source state: the data source restarts (not exact)", chosen.location
        )
        return "missing"
    tracked.data.load_state_dict(state)
    return "restored"


@effect(role=Role.EVERY_RANK)
def start_fresh(ctx: ResumeContext) -> None:
    """No checkpoint is adopted: training starts at step 0."""
    reason = ctx.fresh_reason or "resume=off: starting fresh in a new attempt"
    ctx.result = ResumeResult(0, None, reason, tuple(ctx.passed_over), notes=tuple(ctx.notes))
    log.info(reason)


def resume_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
