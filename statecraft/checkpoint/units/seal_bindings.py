"""The effect bindings of the ``unit_seal`` machine (``machines/unit_seal.toml``).

A unit is a checkpoint directory a framework writes: a Lightning checkpoint generation
(statecraft writes its ``checkpoint.pt`` from the payload it is handed) or a Hugging Face
Trainer ``checkpoint-N`` folder (the Trainer wrote the files; statecraft adopts them). The
table is the order: write or adopt -> make durable -> commit the manifest by exclusive create
-> retire the replaced units. This module says how each step acts on the store. See
``specs/unit_seal.toml`` for the guarantees, proven by ``statecraft crashcheck --machine
unit_seal``.

::

    ctx = UnitSealContext(store, "last.ckpt/g00000002", framework="lightning", step=40,
                          payloads={"checkpoint.pt": lambda f: torch.save(state, f)},
                          retire=("last.ckpt/g00000001",))
    shipped_machine("unit_seal").recover(ctx).raise_for_failure()
"""

from __future__ import annotations

import logging
import posixpath
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

import attrs

from statecraft._version import __version__
from statecraft.checkpoint.kernel.commit import create_manifest_last
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.units.adopt import settle_unit
from statecraft.checkpoint.units.adopt_digests import adopted_records
from statecraft.checkpoint.units.manifest import (
    UNIT_MANIFEST_NAME,
    UNIT_MANIFEST_SCHEMA,
    MetaValue,
    UnitManifest,
    decode_unit_manifest,
)
from statecraft.checkpoint.units.prune import prune_unit
from statecraft.checkpoint.units.verify import unit_files
from statecraft.engine import Bindings
from statecraft.engine.tagging import Role, collect_bindings, effect, guard, observer
from statecraft.errors import UnitCommittedError, UnitDamagedError, UnitError
from statecraft.storage.base import Store, check_relative_path

__all__ = ["Payload", "UnitSealContext", "unit_seal_bindings"]

log = logging.getLogger("statecraft.units")

#: writes one file's bytes into the writer it is given (``lambda f: torch.save(obj, f)``)
Payload = Callable[[BinaryIO], None]


def _check_names(names: Sequence[str], what: str) -> None:
    for name in names:
        check_relative_path(name)
        if name == UNIT_MANIFEST_NAME or name.endswith("/" + UNIT_MANIFEST_NAME):
            raise UnitError(
                f"{what} {name!r} is the commit manifest's name; choose another file name",
                path=name,
                reason="reserved name",
            )


@attrs.define
class UnitSealContext:
    """One seal of ``unit`` in ``store``.

    Attributes:
        store: the store the unit lives in (its root: a Lightning checkpoint directory, a
            Trainer output_dir).
        unit: the unit's directory, relative to the store root.
        framework: who wrote (or hands over) the files: ``lightning``, ``hf-trainer``.
        step: the framework's global step (recorded in the manifest).
        meta: framework facts recorded for people (epoch, monitor value).
        payloads: file name -> writer of its bytes; ``None``: adopt the files already in the
            unit directory (a framework wrote them).
        expect: file names that must be among the adopted files (a framework's
            ``trainer_state.json``): a missing one fails the seal, nothing is committed.
        retire: units this one replaces, pruned only after this one is committed.
        records: size and digest of every file, filled by ``write_payloads`` /
            ``adopt_files``.
        manifest: the committed manifest (filled by ``commit_manifest``).
        retired: the units retired so far.
        observed_problem: why ``observe_unit`` found the unit damaged.
        retire_machine: the ``unit_prune`` machine ``retire_units`` runs (default: shipped).
        commit_conflict: the manifest's exclusive create found another sealer's manifest
            (``discard_own_manifest`` then leaves it alone).

    Raises:
        StoreError / UnitError: a name is not a clean relative name, is the manifest's own
            name, or a retired unit is the unit itself or inside it.
    """

    store: Store
    unit: str
    framework: str
    step: int | None = None
    meta: Mapping[str, MetaValue] = attrs.field(factory=dict)
    payloads: Mapping[str, Payload] | None = None
    expect: tuple[str, ...] = ()
    retire: tuple[str, ...] = ()
    records: dict[str, FileEntry] = attrs.field(factory=dict)
    manifest: UnitManifest | None = None
    retired: list[str] = attrs.field(factory=list)
    observed_problem: str = ""
    retire_machine: Any = None
    commit_conflict: bool = False

    def __attrs_post_init__(self) -> None:
        check_relative_path(self.unit)
        if self.payloads is not None:
            if not self.payloads:
                raise UnitError(
                    f"{self.where}: a seal with payloads needs at least one file",
                    path=self.where,
                    reason="no payloads",
                )
            _check_names(list(self.payloads), "payload")
        _check_names(list(self.expect), "expected file")
        for other in self.retire:
            check_relative_path(other)
            if other == self.unit or other.startswith(self.unit + "/"):
                raise UnitError(
                    f"{self.where}: cannot retire {other!r}, which is the unit being sealed "
                    "or inside it",
                    path=self.where,
                    reason="retire names the unit itself",
                )

    @property
    def where(self) -> str:
        return f"{self.store.describe()}/{self.unit}"

    def path(self, name: str) -> str:
        return f"{self.unit}/{name}"


# ----------------------------------------------------------------------------- observe
@observer()
def observe_unit(ctx: UnitSealContext) -> str:
    """``absent``, ``uncommitted`` (files, no manifest), ``committed`` (a manifest that
    decodes) or ``damaged`` (one that does not, or the unit is a file). Reads only; it does
    not verify the files (a committed unit is refused whatever its files hold)."""
    stat = ctx.store.stat(ctx.unit)
    if stat is None:
        return "absent"
    if not stat.is_dir:
        ctx.observed_problem = "it is a file, not a unit directory"
        return "damaged"
    manifest = ctx.path(UNIT_MANIFEST_NAME)
    if ctx.store.stat(manifest) is None:
        return "uncommitted"
    try:
        decode_unit_manifest(ctx.store.read_bytes(manifest), source=ctx.where)
    except UnitDamagedError as exc:
        ctx.observed_problem = str(getattr(exc, "reason", exc))
        return "damaged"
    except FileNotFoundError:  # removed between the stat and the read
        return "uncommitted"
    return "committed"


# ------------------------------------------------------------------------------ guards
@guard()
def has_payloads(ctx: UnitSealContext) -> bool:
    """statecraft writes the files (Lightning); otherwise it adopts what a framework wrote."""
    return ctx.payloads is not None


# ----------------------------------------------------------------------------- effects
@effect(role=Role.COORDINATOR)
def write_payloads(ctx: UnitSealContext) -> None:
    """Clear uncommitted leftovers of the unit (never adopted), create its directory, and
    write each payload atomically (temporary name, fsync, rename), its size and digest taken
    from the bytes as they were written.

    Raises:
        StoreError / OSError: a write failed; no manifest exists.
        Exception: a payload writer's own error (the file is not published).
    """
    assert ctx.payloads is not None  # the has_payloads guard
    store = ctx.store
    if store.stat(ctx.unit) is not None:
        log.info("clearing the uncommitted leftovers of %s before writing it", ctx.where)
        store.delete_tree(ctx.unit)
    store.make_dirs(ctx.unit)
    for name, produce in ctx.payloads.items():
        parent = posixpath.dirname(name)
        if parent:
            store.make_dirs(ctx.path(parent))
        with store.open_atomic(ctx.path(name)) as writer:
            produce(writer)  # type: ignore[arg-type]  # an AtomicWriter is a binary sink
        record = writer.record
        if record is None:  # pragma: no cover - the store's contract
            raise UnitError(f"{ctx.where}/{name}: the store returned no record for the write")
        ctx.records[name] = FileEntry(record.size, record.digest)


@effect(role=Role.COORDINATOR)
def adopt_files(ctx: UnitSealContext) -> None:
    """Take the files a framework has just written into the unit, each digested from the
    store (the framework did not tell us its bytes): read once each, several at a time, their
    writeback started first (:mod:`statecraft.checkpoint.units.adopt_digests`; that makes
    nothing durable, ``make_files_durable`` does).

    Raises:
        UnitError: the unit holds no file, or an expected file is missing; nothing is
            committed.
    """
    names = unit_files(ctx.store, ctx.unit)
    missing = sorted(set(ctx.expect) - set(names))
    if not names or missing:
        found = f"it holds {names[:8]}" if names else "it holds no file"
        raise UnitError(
            f"{ctx.where}: cannot seal it: {found}; expected {sorted(ctx.expect) or 'files'}"
            f"{f' (missing {missing})' if missing else ''}. The framework's save did not "
            "write what it should; nothing was committed",
            path=ctx.where,
            reason="missing files",
        )
    sizes: dict[str, int] = {}
    for name in names:
        stat = ctx.store.stat(ctx.path(name))
        if stat is None or stat.kind != "file":
            kind = "gone" if stat is None else stat.kind
            raise UnitError(
                f"{ctx.where}/{name} is {kind}, not a regular file: a unit holds regular "
                "files only; nothing was committed",
                path=ctx.where,
                reason=f"{name} is {kind}",
            )
        sizes[name] = stat.size
    ctx.records.update(adopted_records(ctx.store, ctx.unit, sizes))


@effect(role=Role.COORDINATOR)
def make_files_durable(ctx: UnitSealContext) -> None:
    """fsync every file and directory of the unit (deepest first), then every directory from
    the unit's parent up to the store root, so no crash can take a file the manifest will
    name, nor the unit's own entry."""
    settle_unit(ctx.store, ctx.unit)


@effect(role=Role.COORDINATOR)
def commit_manifest(ctx: UnitSealContext) -> None:
    """Create the commit manifest by exclusive create (durable when it returns), naming every
    file recorded above. A file that appeared since is refused (the unit changed under us).

    Raises:
        UnitError: the unit's files changed since they were recorded; nothing committed.
        StoreConflictError: a manifest appeared meanwhile (another sealer); it is untouched.
    """
    present = unit_files(ctx.store, ctx.unit)
    if sorted(present) != sorted(ctx.records):
        raise UnitError(
            f"{ctx.where}: its files changed while it was being sealed (now {present[:8]}, "
            f"recorded {sorted(ctx.records)[:8]}); another process writes into it. Nothing "
            "was committed",
            path=ctx.where,
            reason="files changed while sealing",
        )
    manifest = UnitManifest(
        schema=UNIT_MANIFEST_SCHEMA,
        framework=ctx.framework,
        step=ctx.step,
        files=dict(sorted(ctx.records.items())),
        meta=dict(ctx.meta),
        writer={"statecraft": __version__},
    )
    create_manifest_last(ctx.store, ctx.path(UNIT_MANIFEST_NAME), manifest.encode(), flag=ctx)
    ctx.manifest = manifest


@effect(role=Role.COORDINATOR)
def discard_own_manifest(ctx: UnitSealContext) -> None:
    """After a failed commit: remove the manifest this seal may have created (its durability
    is unknown: after a failed fsync a later one may report success without writing it), so
    no reader adopts a commit a power loss could take back. Another sealer's manifest (an
    exclusive-create conflict) is left alone. The unit stays uncommitted; a framework's files
    must be written again before another seal (they may not be durable either)."""
    if ctx.commit_conflict:
        return
    ctx.store.delete(ctx.path(UNIT_MANIFEST_NAME))


@effect(role=Role.COORDINATOR)
def retire_units(ctx: UnitSealContext) -> None:
    """Prune each replaced unit (the ``unit_prune`` machine: invalidate, then delete), only
    now that this unit is committed and durable.

    Raises:
        UnitError: the manifest of this seal is not known committed (a table bug: nothing is
            pruned).
        StoreError / OSError: a removal failed; the unit is committed, the replaced one is
            left committed or invalidated.
    """
    if ctx.manifest is None:
        raise UnitError(
            f"{ctx.where}: retiring replaced units before this unit is committed would leave "
            "no committed unit; the unit_seal table must commit first. Nothing was pruned",
            path=ctx.where,
            reason="retire before commit",
        )
    for other in ctx.retire:
        prune_unit(ctx.store, other, machine=ctx.retire_machine)
        ctx.retired.append(other)


def _refusal(ctx: UnitSealContext, error: type[UnitError], problem: str) -> UnitError:
    return error(
        f"{ctx.where} {problem}: a seal never writes over it and nothing was touched. Seal a "
        "new unit (a new step or generation), or move this one aside first",
        path=ctx.where,
        reason=problem,
    )


@effect(role=Role.COORDINATOR)
def refuse_committed(ctx: UnitSealContext) -> None:
    """The unit is committed already: refuse (no store operation).

    Raises:
        UnitCommittedError: always.
    """
    raise _refusal(ctx, UnitCommittedError, "is committed already")


@effect(role=Role.COORDINATOR)
def refuse_damaged(ctx: UnitSealContext) -> None:
    """The unit holds a manifest that does not decode: refuse (no store operation).

    Raises:
        UnitDamagedError: always.
    """
    raise _refusal(ctx, UnitDamagedError, f"is damaged ({ctx.observed_problem})")


def unit_seal_bindings() -> Bindings:
    """The bindings of this module's table, collected from the tags above."""
    return collect_bindings(sys.modules[__name__])
