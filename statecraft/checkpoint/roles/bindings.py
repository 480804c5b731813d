"""The effect bindings of the ``roles_boundary`` machine (``machines/roles_boundary.toml``).

The table is the order: prepare the boundary directory -> every role's unit (files durably,
then its own manifest by exclusive create; one in-flight write per role) -> ``_SUCCESS`` by
exclusive create. This module says how each step acts on the store; the commit itself is the
kernel's (:func:`~statecraft.checkpoint.kernel.commit.create_manifest_last`). See
``specs/roles_boundary.toml`` for the guarantees, proven by ``statecraft crashcheck --machine
roles_boundary``.

::

    roles = (StagedRole("policy", 8, {"model.pt": ...}), StagedRole("critic", 12, {...}))
    ctx = BoundaryContext(store, 12, roles, loop_state={"critic_warmup_iterations": 4})
    shipped_machine("roles_boundary").recover(ctx).raise_for_failure()
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import attrs

from statecraft._version import __version__
from statecraft.checkpoint.kernel.commit import (
    create_manifest_last,
    settle_found_unit,
    sweep_temporaries,
)
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.roles.layout import (
    MARKER_NAME,
    ROLE_MANIFEST_NAME,
    boundary_dir,
    role_dir,
)
from statecraft.checkpoint.roles.records import (
    MARKER_SCHEMA,
    ROLE_MANIFEST_SCHEMA,
    BoundaryMarker,
    RoleManifest,
    decode_marker,
    decode_role_manifest,
)
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, observer
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    IterationCommittedError,
    RoleWriteError,
    StoreConflictError,
)
from statecraft.storage.base import Store
from statecraft.storage.digest import Digest, file_digest
from statecraft.storage.local import is_temporary_name

__all__ = ["BoundaryContext", "RoleWriteError", "StagedRole", "roles_boundary_bindings"]

log = logging.getLogger("statecraft.roles")

#: runs one role's write on that role's writer and returns its future (``None``: inline)
Dispatch = Callable[[str, Callable[[], RoleManifest]], "Future[RoleManifest]"]


@attrs.frozen
class StagedRole:
    """One role's payloads of a boundary, captured before the first write.

    Attributes:
        name: the role.
        optimizer_step: the optimizer counter the role commits.
        files: file name -> its bytes, in write order.
    """

    name: str
    optimizer_step: int
    files: Mapping[str, bytes]

    def entries(self) -> dict[str, FileEntry]:
        """Each file's size and digest (what the role manifest records)."""
        return {n: FileEntry(len(b), Digest.of(b)) for n, b in sorted(self.files.items())}


@attrs.define
class BoundaryContext:
    """One save of the boundary ``iteration`` into ``store`` (the roles store of an attempt).

    Attributes:
        roles: the staged roles, in order (the first holds the data cursor and the RNG).
        loop_state: the loop's mapping of JSON scalars, recorded verbatim in ``_SUCCESS``.
        dispatch: runs a role's write on its writer (``None``: each role inline, in order).
        manifests: role -> its committed manifest (filled by ``write_roles``).
        kept: the roles a retry found committed with exactly its bytes (not rewritten).
        marker: the committed ``_SUCCESS`` (filled by ``create_marker``).
        commit_conflict: the marker's create met another writer's (left alone).
        observed_problem: why ``observe_boundary`` found the boundary damaged.
        uncertain: role units whose manifest create failed (it may exist, not durable).
    """

    store: Store
    iteration: int
    roles: tuple[StagedRole, ...]
    loop_state: dict[str, Any] = attrs.field(factory=dict)
    dispatch: Dispatch | None = None
    manifests: dict[str, RoleManifest] = attrs.field(factory=dict)
    kept: list[str] = attrs.field(factory=list)
    marker: BoundaryMarker | None = None
    commit_conflict: bool = False
    observed_problem: str = ""
    uncertain: list[str] = attrs.field(factory=list)

    @property
    def iter_dir(self) -> str:
        return boundary_dir(self.iteration)

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{self.iter_dir}"

    def path(self, name: str) -> str:
        return f"{self.iter_dir}/{name}"


# ----------------------------------------------------------------------------- observe
@observer()
def observe_boundary(ctx: BoundaryContext) -> str:
    """``absent``, ``partial`` (no ``_SUCCESS``), ``committed`` (a ``_SUCCESS`` that decodes)
    or ``damaged``. Reads only."""
    stat = ctx.store.stat(ctx.iter_dir)
    if stat is None:
        return "absent"
    if not stat.is_dir:
        ctx.observed_problem = "it is a file, not a boundary directory"
        return "damaged"
    marker = ctx.path(MARKER_NAME)
    if ctx.store.stat(marker) is None:
        return "partial"
    try:
        decode_marker(ctx.store.read_bytes(marker), source=f"{ctx.where}/{MARKER_NAME}")
    except CheckpointCorruptError as exc:
        ctx.observed_problem = str(exc.fields.get("problem", exc))
        return "damaged"
    except FileNotFoundError:
        return "partial"
    return "committed"


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def prepare_boundary(ctx: BoundaryContext) -> None:
    """Sweep writer temporaries, remove every uncommitted role directory (never adopted),
    keep committed role units, and create the boundary directory durably.

    Raises:
        CheckpointError: the boundary holds an entry that is no role of this save (another
            loop's boundary, or files put there by hand); nothing was changed.
    """
    store, names = ctx.store, {role.name for role in ctx.roles}
    if store.stat(ctx.iter_dir) is not None:
        entries = [e for e in store.list(ctx.iter_dir) if not is_temporary_name(e)]
        strangers = sorted(set(entries) - names)
        if strangers:
            raise CheckpointError(
                f"{ctx.where} holds {strangers}, which are no role of this save "
                f"({sorted(names)}): the boundary belongs to another loop or was edited by "
                "hand. Nothing was changed; move it aside, or track the same roles",
                path=ctx.where,
            )
        sweep_temporaries(store, ctx.iter_dir, *(ctx.path(e) for e in entries))
        committed = [
            e for e in entries if store.stat(f"{ctx.path(e)}/{ROLE_MANIFEST_NAME}") is not None
        ]
        if not committed:  # nothing to keep: a fresh directory (an old one's fsync may have failed)
            log.info("clearing uncommitted leftovers of %s", ctx.where)
            store.delete_tree(ctx.iter_dir)
        for entry in sorted(set(entries) - set(committed)):
            log.info("clearing uncommitted leftovers of %s/%s", ctx.where, entry)
            store.delete_tree(ctx.path(entry))
        if committed:  # maybe only in the page cache of a killed save: durable first
            settle_found_unit(store, ("", ctx.iter_dir, *(ctx.path(e) for e in committed)))
    store.make_dirs(ctx.iter_dir)


def _keep_committed(ctx: BoundaryContext, role: StagedRole) -> RoleManifest:
    """A role unit a crashed save committed: kept when it records exactly ``role``'s bytes
    (they verify on disk), else refused: a committed role unit is never rewritten."""
    where = f"{ctx.store.describe()}/{role_dir(ctx.iteration, role.name)}"
    unit = role_dir(ctx.iteration, role.name)
    settle_found_unit(ctx.store, (unit, ctx.iter_dir))  # maybe only in a killed save's cache
    found = decode_role_manifest(ctx.store.read_bytes(f"{unit}/{ROLE_MANIFEST_NAME}"), source=where)
    same = found.optimizer_step == role.optimizer_step and found.files == role.entries()
    intact = same and all(
        file_digest(ctx.store, f"{unit}/{name}", e.digest.algorithm) == e.digest
        for name, e in found.files.items()
    )
    if not intact:
        raise IterationCommittedError(
            f"{where} is a role unit committed by an earlier save with other content (counter "
            f"{found.optimizer_step}, this save's {role.optimizer_step}); a committed role is "
            f"never rewritten. The boundary has no {MARKER_NAME} (it was never adopted): move "
            f"{ctx.where} aside and save again",
            path=where,
        )
    ctx.kept.append(role.name)
    return found


def write_role_unit(ctx: BoundaryContext, role: StagedRole) -> RoleManifest:
    """One role's unit: each file durably, then its manifest by exclusive create (or the
    committed unit a crashed save left, kept when it holds exactly these bytes)."""
    store, unit = ctx.store, role_dir(ctx.iteration, role.name)
    if store.stat(f"{unit}/{ROLE_MANIFEST_NAME}") is not None:
        return _keep_committed(ctx, role)
    store.make_dirs(unit)
    for name, data in role.files.items():
        store.write_atomic(f"{unit}/{name}", data)
    manifest = RoleManifest(
        schema=ROLE_MANIFEST_SCHEMA,
        iteration=ctx.iteration,
        role=role.name,
        optimizer_step=role.optimizer_step,
        files=role.entries(),
        writer={"statecraft": __version__},
    )
    try:
        create_manifest_last(store, f"{unit}/{ROLE_MANIFEST_NAME}", manifest.encode())
    except StoreConflictError:
        raise
    except BaseException:  # its durability is unknown: discard_failed_roles removes it
        ctx.uncertain.append(unit)
        raise
    return manifest


def _role_failed(ctx: BoundaryContext, role: str, exc: BaseException) -> RoleWriteError:
    return RoleWriteError(
        f"{ctx.where}: the write of role {role!r} failed ({type(exc).__name__}: {exc}); the "
        f"boundary is not committed (no {MARKER_NAME}) and the previous boundary stays the "
        "one resume adopts. Fix the cause and save again",
        role=role,
        iteration=ctx.iteration,
        path=ctx.where,
    )


@effect(role=Role.COORDINATOR)
def write_roles(ctx: BoundaryContext) -> None:
    """Every role's unit, each on its own writer when ``dispatch`` is set (one in-flight
    write per role), all joined before this returns.

    Raises:
        RoleWriteError: naming the first role (in order) whose write failed; the others were
            joined first.
        IterationCommittedError: a committed role unit holds other bytes (never rewritten).
    """
    pending: list[tuple[str, Any]] = []
    for role in ctx.roles:
        job = lambda r=role: write_role_unit(ctx, r)  # noqa: E731 - bound per role
        if ctx.dispatch is None:
            try:
                ctx.manifests[role.name] = job()
            except IterationCommittedError:
                raise
            except Exception as exc:  # named with its role; the cause stays chained
                raise _role_failed(ctx, role.name, exc) from exc
        else:
            pending.append((role.name, ctx.dispatch(role.name, job)))
    failures: list[tuple[str, BaseException]] = []
    for name, future in pending:
        try:
            ctx.manifests[name] = future.result()
        except Exception as exc:  # every role is joined before the first failure is raised
            failures.append((name, exc))
    if failures:
        name, error = failures[0]
        if isinstance(error, IterationCommittedError):
            raise error
        raise _role_failed(ctx, name, error) from error


@effect(role=Role.COORDINATOR)
def create_marker(ctx: BoundaryContext) -> None:
    """The commit: ``_SUCCESS`` by exclusive create, naming every role with the counter it
    committed and the loop's ``loop_state``, after every role manifest is durable.

    Raises:
        CheckpointError: a role manifest is missing (a table that commits before writing
            every role); nothing committed.
        StoreConflictError: a marker appeared meanwhile (another writer); it is untouched.
    """
    missing = [
        r.name for r in ctx.roles
        if r.name not in ctx.manifests
        or ctx.store.stat(f"{role_dir(ctx.iteration, r.name)}/{ROLE_MANIFEST_NAME}") is None
    ]  # fmt: skip
    if missing:
        raise CheckpointError(
            f"{ctx.where}: roles {missing} are not committed; {MARKER_NAME} is written only "
            "after every role (the roles_boundary table must write the roles first)",
            path=ctx.where,
        )
    marker = BoundaryMarker(
        schema=MARKER_SCHEMA,
        iteration=ctx.iteration,
        roles=[r.name for r in ctx.roles],
        counters={r.name: ctx.manifests[r.name].optimizer_step for r in ctx.roles},
        loop_state=dict(ctx.loop_state),
        writer={"statecraft": __version__},
    )
    create_manifest_last(ctx.store, ctx.path(MARKER_NAME), marker.encode(), flag=ctx)
    ctx.marker = marker


@effect(role=Role.COORDINATOR)
def discard_own_marker(ctx: BoundaryContext) -> None:
    """After a failed commit: remove the ``_SUCCESS`` this save may have created (its
    durability is unknown), never another writer's."""
    if not ctx.commit_conflict:
        ctx.store.delete(ctx.path(MARKER_NAME))


@effect(role=Role.COORDINATOR)
def discard_failed_roles(ctx: BoundaryContext) -> None:
    """After a failed role write: remove each role manifest whose create failed (it may
    exist without being durable: after a failed fsync a later one may report success without
    writing it), so no retry keeps a role commit a power loss could take back."""
    for unit in ctx.uncertain:
        ctx.store.delete(f"{unit}/{ROLE_MANIFEST_NAME}")


@effect(role=Role.COORDINATOR)
def refuse_committed(ctx: BoundaryContext) -> None:
    """The boundary is committed already: refuse (no store operation).

    Raises:
        IterationCommittedError: always.
    """
    raise IterationCommittedError(
        f"{ctx.where} is a committed boundary (it holds {MARKER_NAME}): a committed boundary "
        "is never rewritten and nothing was touched. Resume from it (resume=auto) instead of "
        "saving its iteration again",
        path=ctx.where,
    )


@effect(role=Role.COORDINATOR)
def refuse_damaged(ctx: BoundaryContext) -> None:
    """The boundary's marker does not decode: refuse (no store operation).

    Raises:
        CheckpointCorruptError: always.
    """
    raise CheckpointCorruptError(
        ctx.where,
        f"its {MARKER_NAME} is damaged ({ctx.observed_problem}); nothing was touched",
        "move the boundary aside and save again",
    )


def roles_boundary_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
