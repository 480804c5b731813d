"""The effect bindings of the ``save`` machine (``machines/save.toml``).

The table is the order: components -> control state -> manifest (exclusive create, the commit)
-> ``latest_checkpoint.txt``, each durable before the next. This module says *how* each step
acts on a store; it never decides the order. See ``specs/save.toml`` for the guarantees.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from statecraft.checkpoint.layout import (
    LATEST_POINTER,
    MANIFEST_NAME,
    format_latest,
    iter_dirname,
    parse_latest,
)
from statecraft.checkpoint.manifest import (
    MANIFEST_SCHEMA,
    FileEntry,
    Manifest,
    SavePlan,
    decode_manifest,
)
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    PlanDriftError,
    StoreConflictError,
)
from statecraft.storage.base import FileRecord, Store
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = [
    "BULK_FILES",
    "CONTROL_FILES",
    "FULL_COMPONENTS",
    "SaveContext",
    "full_save_plan",
    "read_manifest",
    "save_bindings",
]

log = logging.getLogger("statecraft.save")

FULL_COMPONENTS = ("model", "optimizer", "training_state")
BULK_FILES = ("model.pt", "optim.pt")  # model, optimizer
CONTROL_FILES = ("trainer.pt", "data.pt")  # training_state (data.pt only with a data source)


def full_save_plan(
    iteration: int, *, with_data: bool, format_name: str = "consolidated"
) -> SavePlan:
    """The full plan: every logical component, ``data.pt`` when a data source is tracked."""
    files = ["model.pt", "optim.pt", "trainer.pt"] + (["data.pt"] if with_data else [])
    return SavePlan(iteration, format_name, FULL_COMPONENTS, tuple(sorted(files)))


@attrs.define
class SaveContext:
    """One save transaction.

    Attributes:
        store: the checkpoints root (``.../<RUN_TS>/checkpoints``).
        plan: what this save writes.
        payloads: file name -> zero-argument callable producing the object to serialize
            (called once, when that file is written).
        writer: serializes payloads into the store.
        records: size and digest of each file written, filled in as files land.
        commit_conflict: the manifest's exclusive create found another commit in place.
    """

    store: Store
    plan: SavePlan
    payloads: Mapping[str, Callable[[], Any]]
    writer: ConsolidatedWriter = attrs.field(factory=ConsolidatedWriter)
    writer_info: dict[str, str] = attrs.field(factory=dict)
    records: dict[str, FileRecord] = attrs.field(factory=dict)
    commit_conflict: bool = False

    def __attrs_post_init__(self) -> None:
        missing = sorted(set(self.plan.files) - set(self.payloads))
        if missing:
            raise CheckpointError(
                f"save plan needs payloads for {missing}; got {sorted(self.payloads)}"
            )

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.plan.iteration)

    def path(self, name: str) -> str:
        return f"{self.iter_dir}/{name}"


def read_manifest(store: Store, iteration: int) -> Manifest:
    """The committed manifest of ``iteration``.

    Raises:
        FileNotFoundError: the iteration has no manifest.
        CheckpointCorruptError: the manifest is malformed or names another iteration.
    """
    name = f"{iter_dirname(iteration)}/{MANIFEST_NAME}"
    source = f"{store.describe()}/{name}"
    manifest = decode_manifest(store.read_bytes(name), source=source)
    if manifest.iteration != iteration:
        raise CheckpointCorruptError(
            source,
            f"manifest says iteration {manifest.iteration} but lives in {iter_dirname(iteration)}",
            "Move the directory aside; it was copied or renamed by hand.",
        )
    return manifest


def _latest_iteration(store: Store) -> int | None:
    try:
        return parse_latest(store.read_bytes(LATEST_POINTER))
    except (FileNotFoundError, ValueError):
        return None


# ----------------------------------------------------------------------------- observe
@observer()
def observe_save(ctx: SaveContext) -> str:
    """Classify durable storage for this plan's iteration (the table's ``[recover]`` keys)."""
    if ctx.store.stat(ctx.iter_dir) is None:
        return "absent"
    if ctx.store.stat(ctx.path(MANIFEST_NAME)) is None:
        return "partial"
    try:
        read_manifest(ctx.store, ctx.plan.iteration)
    except CheckpointCorruptError:
        return "corrupt"
    if _latest_iteration(ctx.store) == ctx.plan.iteration:
        return "committed"
    return "manifest_committed"


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def prepare_iteration(ctx: SaveContext) -> None:
    """Clear uncommitted leftovers of this iteration (never adopted) and create its directory."""
    sweep = getattr(ctx.store, "sweep_temporaries", None)
    if sweep is not None:
        sweep("")
    if ctx.store.stat(ctx.iter_dir) is not None:
        log.info("clearing uncommitted leftovers of %s before writing it", ctx.iter_dir)
        ctx.store.delete_tree(ctx.iter_dir)
    ctx.store.make_dirs(ctx.iter_dir)


def _write_files(ctx: SaveContext, names: tuple[str, ...]) -> None:
    for name in names:
        if name in ctx.plan.files:
            ctx.records[name] = ctx.writer.write(ctx.store, ctx.path(name), ctx.payloads[name]())


@effect(role=Role.COORDINATOR)
def write_components(ctx: SaveContext) -> None:
    """Write the bulk component files (``model.pt``, ``optim.pt``), each durable."""
    _write_files(ctx, BULK_FILES)


@effect(role=Role.COORDINATOR)
def write_control(ctx: SaveContext) -> None:
    """Write the control state (``trainer.pt``, ``data.pt``), each durable."""
    _write_files(ctx, CONTROL_FILES)


@effect(role=Role.COORDINATOR)
def commit_manifest(ctx: SaveContext) -> None:
    """Publish the manifest by exclusive create: the iteration is now an immutable commit."""
    missing = sorted(set(ctx.plan.files) - set(ctx.records))
    if missing:
        raise CheckpointCorruptError(
            ctx.iter_dir, f"files {missing} were not written", "Retry the save."
        )
    manifest = Manifest(
        schema=MANIFEST_SCHEMA,
        iteration=ctx.plan.iteration,
        format=ctx.plan.format,
        components=ctx.plan.components,
        files={n: FileEntry(r.size, r.digest) for n, r in sorted(ctx.records.items())},
        writer=dict(ctx.writer_info),
    )
    try:
        ctx.store.create_exclusive(ctx.path(MANIFEST_NAME), manifest.encode())
    except StoreConflictError:
        ctx.commit_conflict = True
        raise


@effect(role=Role.COORDINATOR)
def advance_latest(ctx: SaveContext) -> None:
    """Point ``latest_checkpoint.txt`` at this iteration (atomic replace)."""
    ctx.store.write_atomic(LATEST_POINTER, format_latest(ctx.plan.iteration))


@effect(role=Role.COORDINATOR)
def reconcile_committed(ctx: SaveContext) -> None:
    """A retry at a committed iteration: the plan must match and the files must be there;
    leftover writer temporaries (never part of the commit) are removed, and the iteration is
    made durable (it may have been found unsynced after a process kill) before the pointer
    moves.

    Raises:
        PlanDriftError: the committed plan differs (nothing is touched).
        CheckpointCorruptError: a committed file is missing or has another size.
    """
    manifest = read_manifest(ctx.store, ctx.plan.iteration)
    differences = ctx.plan.differences(manifest.plan)
    if differences:
        raise PlanDriftError(
            f"{ctx.store.describe()}/{ctx.iter_dir} is committed with another plan ("
            + "; ".join(differences)
            + "). A committed iteration is never rewritten: restore the original component "
            "plan and tracked objects, or resume=off to start a new attempt"
        )
    for name, entry in manifest.files.items():
        stat = ctx.store.stat(ctx.path(name))
        if stat is None or stat.size != entry.size:
            found = "missing" if stat is None else f"{stat.size} bytes"
            raise CheckpointCorruptError(
                f"{ctx.store.describe()}/{ctx.path(name)}",
                f"committed file is {found}, manifest says {entry.size} bytes",
                "The committed checkpoint was damaged; move it aside and resume from an older one.",
            )
    sweep = getattr(ctx.store, "sweep_temporaries", None)
    if sweep is not None:
        sweep(ctx.iter_dir)
        sweep("")
    # The commit may have been found in the page cache of a killed process: make it durable
    # before the pointer names it.
    ctx.store.make_durable(ctx.iter_dir)
    log.info(
        "%s is already committed with this plan: only the latest pointer is completed", ctx.iter_dir
    )


@effect(role=Role.COORDINATOR)
def refuse_corrupt(ctx: SaveContext) -> None:
    """The iteration holds a manifest that does not parse: refuse to touch it."""
    read_manifest(ctx.store, ctx.plan.iteration)  # raises with the precise problem
    raise CheckpointCorruptError(ctx.iter_dir, "manifest changed while saving", "Retry the save.")


@effect(role=Role.COORDINATOR)
def discard_partial(ctx: SaveContext) -> None:
    """After a failed write: remove this iteration's files so a full disk is not left fuller.

    This includes a manifest this save published itself: the save failed before it was
    acknowledged, and after a failed fsync that manifest may never become durable. Only when
    the manifest's exclusive create met another writer's commit is the directory kept.
    """
    if ctx.commit_conflict:
        log.warning("%s was committed by another writer; it is kept", ctx.iter_dir)
        return
    ctx.store.delete_tree(ctx.iter_dir)


def save_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
