"""The rules of a full save's commit, whatever writes its bulk (``save`` with the consolidated
writer, ``dcp_save`` with every rank's DCP shards): the fence before each publication, the
manifest of the plan created last, what a retry at a committed iteration must find, and the
refusal of an iteration it must not touch. The generic effects are the commit kernel's
(:mod:`statecraft.checkpoint.kernel.commit`); these bind them to the ``iter_N`` layout.

Both save bindings modules call these; each keeps only what its writer does differently.
"""

from __future__ import annotations

from statecraft.checkpoint.kernel.catalog import CheckpointState, classify
from statecraft.checkpoint.kernel.commit import UnitWrite, create_manifest_last, fence_unit
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME, parse_latest
from statecraft.checkpoint.kernel.manifest import MANIFEST_SCHEMA, FileEntry, Manifest, SavePlan
from statecraft.checkpoint.kernel.verify import read_manifest, verify_checkpoint
from statecraft.errors import CheckpointCorruptError, PlanDriftError
from statecraft.storage.base import FileRecord, Store
from statecraft.writers.base import Writer

__all__ = [
    "FencedSave",
    "fence_save",
    "latest_iteration",
    "observe_iteration",
    "publish_manifest",
    "refuse_plan_drift",
    "refuse_untouchable",
    "verify_found_commit",
]


#: What the fence reads of a save context (``SaveContext``, ``DcpSaveContext``).
FencedSave = UnitWrite


def fence_save(ctx: FencedSave, path: str) -> None:
    """Refuse a publication or removal of ``path`` that would touch another writer's work:
    the lease (where this process holds one) must still be ours, and nothing but the manifest
    itself is written into (or removed from) an iteration that holds a manifest. A refusal
    sets ``ctx.commit_conflict`` (the discard then keeps the directory).

    Raises:
        WriterLeaseError: the lease was taken over (or is gone).
        IterationCommittedError: the iteration holds a manifest (someone committed it).
    """
    fence_unit(ctx, path, manifest_name=MANIFEST_NAME)


def publish_manifest(
    ctx: FencedSave,
    fenced: Store,
    plan: SavePlan,
    records: dict[str, FileRecord],
    writer: dict[str, str],
) -> None:
    """Publish the manifest of ``plan`` naming every file in ``records`` by exclusive create
    through ``fenced`` (the lease is re-read first): the iteration is now an immutable commit.
    The create first settles the writer's deferred files and directories, so a failure there
    fails the commit and the discard removes the iteration.

    Raises:
        StoreConflictError: another commit holds the name (it is untouched;
            ``ctx.commit_conflict`` is set).
        WriterLeaseError / IterationCommittedError: the fence refused (nothing published).
    """
    manifest = Manifest(
        schema=MANIFEST_SCHEMA,
        iteration=plan.iteration,
        format=plan.format,
        components=plan.components,
        files={n: FileEntry(r.size, r.digest) for n, r in sorted(records.items())},
        writer=writer,
    )
    create_manifest_last(fenced, ctx.path(MANIFEST_NAME), manifest.encode(), flag=ctx)


def observe_iteration(store: Store, iteration: int) -> str:
    """Classify durable storage for a save of ``iteration`` (the save tables' ``[recover]``
    keys) from the catalog at level ``"manifest"``: ``absent`` / ``partial`` / ``corrupt``
    (an iteration retention marked included: it is never rewritten), ``committed`` (latest
    names it) or ``manifest_committed``. Reads only."""
    entry = classify(store, iteration, level="manifest")
    if entry.mark is not None:
        return CheckpointState.CORRUPT.value
    if entry.state is not CheckpointState.COMMITTED:
        label: str = entry.state.value  # absent / partial / corrupt
        return label
    if latest_iteration(store) == iteration:
        return "committed"
    return "manifest_committed"


def latest_iteration(store: Store) -> int | None:
    """The iteration ``latest_checkpoint.txt`` names; ``None`` when absent or unreadable."""
    try:
        return parse_latest(store.read_bytes(LATEST_POINTER))
    except (FileNotFoundError, ValueError):
        return None


def refuse_plan_drift(store: Store, iter_dir: str, plan: SavePlan, committed: SavePlan) -> None:
    """A retry at a committed iteration must bring the committed plan.

    Raises:
        PlanDriftError: ``plan`` differs from ``committed`` (the differences are named;
            nothing is touched).
    """
    differences = plan.differences(committed)
    if differences:
        raise PlanDriftError(
            f"{store.describe()}/{iter_dir} is committed with another plan ("
            + "; ".join(differences)
            + "). A committed iteration is never rewritten: restore the original component "
            "plan and tracked objects, or resume=off to start a new attempt"
        )


def verify_found_commit(store: Store, iteration: int, *, level: str, writer: Writer | None) -> None:
    """A committed iteration a retry found (it may not have written it) verifies at ``level``
    before ``latest`` moves onto it.

    Raises:
        CheckpointCorruptError: a committed file is missing, has another size or other bytes
            than its manifest records (nothing is touched; ``latest`` stays as it was).
    """
    try:
        verify_checkpoint(store, iteration, level=level, writer=writer, keep_payloads=False)
    except CheckpointCorruptError as exc:
        raise CheckpointCorruptError(
            exc.path,
            f"{exc.problem} (found committed by this retried save, which leaves latest as it was)",
            "The committed checkpoint was damaged; move it aside and resume from an older one.",
        ) from None


def refuse_untouchable(store: Store, iteration: int, iter_dir: str) -> None:
    """Refuse an iteration whose manifest does not parse, or that retention marked
    (weights-only, invalidated): a save never rewrites it and ``latest`` never names it.

    Raises:
        CheckpointCorruptError: always (the precise problem when the manifest is unreadable).
    """
    entry = classify(store, iteration, level="manifest")
    if entry.mark is not None:
        raise CheckpointCorruptError(
            f"{store.describe()}/{iter_dir}",
            f"is {entry.mark.reason()}; a save never rewrites an iteration retention has "
            "pruned or is deleting, and latest never names one. Nothing was touched",
            "Resume from the newest committed checkpoint (resume=auto) instead of saving this "
            "step again.",
        )
    read_manifest(store, iteration)  # raises with the precise problem
    raise CheckpointCorruptError(iter_dir, "manifest changed while saving", "Retry the save.")
