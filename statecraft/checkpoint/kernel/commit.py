"""The commit kernel: the effects every write transaction binds, whatever its layout.

A write transaction (``save``, ``dcp_save``, ``artifact``, ``unit_seal``, ``direct_save``)
is one protocol: write the payloads durably, create the manifest last by exclusive create,
maybe advance a pointer. Each transaction's table (``machines/<name>.toml``) keeps its own
order; its bindings call these functions with its own layout (the unit directory, the manifest
name, the pointer) and never re-implement them:

* :func:`fence_unit`: before each publication or removal, the lease (where one is held) must
  still be ours, and nothing but the manifest is written into a unit that holds a manifest;
* :func:`prepare_unit`: clear a unit's uncommitted leftovers (never adopted) and create it;
* :func:`require_staged` / :func:`write_durably` / :func:`require_written`: every payload
  captured before the first write, each written durably, none missing at the commit;
* :func:`create_manifest_last`: the commit, by exclusive create (a conflict is flagged);
* :func:`advance_pointer`: ``latest_checkpoint.txt`` names the unit, by atomic replace;
* :func:`settle_found_unit`: a unit found committed by a retry is swept and made durable
  before a pointer names it.

A refusal by the fence, or a manifest create that met another writer's commit, sets the
context's ``commit_conflict`` (its discard then keeps the directory: it is not ours).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Protocol

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, format_latest
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    IterationCommittedError,
    StoreConflictError,
    WriterLeaseError,
)
from statecraft.storage.base import FileRecord, Store

__all__ = [
    "ConflictFlag",
    "LeaseCheck",
    "PayloadWriter",
    "UnitWrite",
    "advance_pointer",
    "create_manifest_last",
    "fence_unit",
    "prepare_unit",
    "require_staged",
    "require_written",
    "settle_found_unit",
    "sweep_temporaries",
    "write_durably",
]

log = logging.getLogger("statecraft.save")


class LeaseCheck(Protocol):
    """What the kernel needs of a writer lease (``WriterLease``, ``ObjectStoreLease``)."""

    def check(self) -> None: ...


class ConflictFlag(Protocol):
    """A context whose ``commit_conflict`` records that another writer was in the way."""

    commit_conflict: bool


class UnitWrite(Protocol):
    """What the kernel reads and sets of a write transaction's context: its store, its lease,
    the unit directory and the conflict flag."""

    commit_conflict: bool

    @property
    def store(self) -> Store: ...

    @property
    def lease(self) -> LeaseCheck | None: ...

    @property
    def iter_dir(self) -> str: ...

    def path(self, name: str) -> str: ...


class PayloadWriter(Protocol):
    """What :func:`write_durably` calls of a :class:`~statecraft.writers.base.Writer`."""

    def begin_write(self, name: str) -> None: ...

    # The payload is whatever the writer serializes (a state dict, a torch object): object.
    def write(self, store: Store, path: str, payload: object) -> FileRecord: ...


def fence_unit(
    ctx: UnitWrite,
    path: str,
    *,
    manifest_name: str,
    holds: str = "a manifest",
    unit: str = "a committed iteration",
) -> None:
    """Refuse a publication or removal of ``path`` that would touch another writer's work:
    the lease (where this process holds one) must still be ours, and nothing but the
    manifest ``manifest_name`` itself is written into (or removed from) a unit that holds it.
    ``holds`` and ``unit`` word the refusal (``"an artifact manifest"``, ``"a committed
    artifact"``). A refusal sets ``ctx.commit_conflict``.

    Raises:
        WriterLeaseError: the lease was taken over (or is gone).
        IterationCommittedError: the unit holds a manifest (someone committed it).
    """
    try:
        if ctx.lease is not None:
            ctx.lease.check()
        manifest = ctx.path(manifest_name)
        inside = path == ctx.iter_dir or path.startswith(ctx.iter_dir + "/")
        if inside and path != manifest and ctx.store.stat(manifest) is not None:
            where = f"{ctx.store.describe()}/{ctx.iter_dir}"
            raise IterationCommittedError(
                f"{where} holds {holds} (another writer committed it) while this save was "
                f"about to write {path}: {unit} is never rewritten. Nothing was changed; make "
                "sure only one process writes this attempt",
                path=where,
            )
    except (WriterLeaseError, IterationCommittedError):
        ctx.commit_conflict = True
        raise


def sweep_temporaries(store: Store, *paths: str) -> None:
    """Remove the writer temporaries a killed process left in each of ``paths`` (where the
    store keeps any: a local store; an object store has none)."""
    sweep = getattr(store, "sweep_temporaries", None)
    if sweep is not None:
        for path in paths:
            sweep(path)


def prepare_unit(
    ctx: UnitWrite, fenced: Store, *, label: str, logger: logging.Logger = log
) -> None:
    """Clear the uncommitted leftovers of the unit ``ctx.iter_dir`` (never adopted; removed
    through ``fenced``, so the fence runs first) and create its directory, its entry settled
    later by the manifest's commit. With nothing to clear, the lease is still checked before
    the first write. ``label`` names the unit in the line logged on ``logger``."""
    sweep_temporaries(ctx.store, "")
    if ctx.store.stat(ctx.iter_dir) is not None:
        logger.info("clearing uncommitted leftovers of %s before writing it", label)
        fenced.delete_tree(ctx.iter_dir)
    elif ctx.lease is not None:
        ctx.lease.check()
    fenced.make_dirs(ctx.iter_dir, defer_sync=True)  # settled by the manifest's commit


def require_staged(staged: Sized, expected: Sized, *, iter_dir: str, table: str) -> None:
    """Every payload was captured before the first write.

    Raises:
        CheckpointError: a write ran before staging (a table that writes before it stages).
    """
    if len(staged) != len(expected):
        raise CheckpointError(
            f"{iter_dir}: a write ran before stage_payloads captured the payloads; the "
            f"{table} table must stage before writing"
        )


def write_durably(
    writer: PayloadWriter,
    fenced: Store,
    ctx: UnitWrite,
    names: Iterable[str],
    staged: Mapping[str, object],
    records: dict[str, FileRecord],
) -> None:
    """Write each of ``names`` (in this order) from ``staged`` into the unit through
    ``fenced``, each durable when its write returns (or settled by the manifest's create);
    its size and digest land in ``records`` as it lands."""
    for name in names:
        writer.begin_write(name)
        records[name] = writer.write(fenced, ctx.path(name), staged[name])


def require_written(
    expected: Iterable[str], written: Iterable[str], *, where: str, retry: str
) -> None:
    """Every file the plan names (``expected``, in the order the refusal lists them) was
    written before the manifest names it.

    Raises:
        CheckpointCorruptError: a file is missing (nothing is published).
    """
    done = set(written)
    missing = [name for name in expected if name not in done]
    if missing:
        raise CheckpointCorruptError(where, f"files {missing} were not written", retry)


def create_manifest_last(
    store: Store, path: str, data: bytes, *, flag: ConflictFlag | None = None
) -> None:
    """The commit: create the manifest ``path`` by exclusive create, after every payload (the
    create settles the store's deferred files and directories first, so a failure there fails
    the commit).

    Raises:
        StoreConflictError: another commit holds the name (it is untouched;
            ``flag.commit_conflict`` is set where a flag is given).
    """
    try:
        store.create_exclusive(path, data)
    except StoreConflictError:
        if flag is not None:
            flag.commit_conflict = True
        raise


def advance_pointer(
    store: Store, iteration: int, *, write: Callable[[str, bytes], object] | None = None
) -> None:
    """Point ``latest_checkpoint.txt`` at ``iteration``: by atomic replace through ``store``
    (a fenced store checks the lease first), or by ``write`` (a direct root's fenced
    If-Match write)."""
    if write is None:
        store.write_atomic(LATEST_POINTER, format_latest(iteration))
    else:
        write(LATEST_POINTER, format_latest(iteration))


def settle_found_unit(store: Store, dirs: Iterable[str]) -> None:
    """A unit a retry found committed: remove the writer temporaries a killed commit left in
    each of ``dirs`` (never part of the commit) and at the root, then make each durable (it
    may have been found in the page cache of a killed process) before a pointer names it."""
    dirs = tuple(dirs)
    sweep_temporaries(store, *dirs, "")
    for path in dirs:
        store.make_durable(path)
