"""Verification of units: is a checkpoint directory committed, and does it hold what its
commit manifest promises?

A unit is judged from the store alone, never from the framework's own files: ``absent`` (no
directory), ``uncommitted`` (files but no commit manifest: a save that did not finish),
``damaged`` (a manifest that does not decode, or a file it names missing or different, or a
file it does not name), ``committed`` (every named file has its size and, for a deep check,
its digest). Reads only; damage is a verdict, never an exception.
"""

from __future__ import annotations

import attrs

from statecraft.checkpoint.kernel.listed_files import (
    FileMismatch,
    first_listed_mismatch,
    listed_file_mismatch,
)
from statecraft.checkpoint.units.manifest import (
    UNIT_MANIFEST_NAME,
    UnitManifest,
    decode_unit_manifest,
)
from statecraft.errors import StatecraftError, UnitDamagedError, UnitError, UnitNotCommittedError
from statecraft.storage.base import Store
from statecraft.storage.local import is_temporary_name

__all__ = [
    "UnitVerdict",
    "require_committed",
    "unit_files",
    "verify_unit",
]

STATES = ("committed", "uncommitted", "damaged", "absent")


@attrs.frozen
class UnitVerdict:
    """What one unit is, and why.

    Attributes:
        unit: its path relative to the store root.
        state: ``committed``, ``uncommitted``, ``damaged`` or ``absent``.
        reason: a sentence saying why (the missing manifest, the file that differs).
        manifest: the decoded commit manifest (``None`` when it is absent or does not decode).
        where: the store and unit, for messages.
    """

    unit: str
    state: str = attrs.field(validator=attrs.validators.in_(STATES))
    reason: str
    manifest: UnitManifest | None = None
    where: str = ""

    @property
    def committed(self) -> bool:
        return self.state == "committed"

    @property
    def step(self) -> int | None:
        return None if self.manifest is None else self.manifest.step


def unit_files(store: Store, unit: str) -> list[str]:
    """Every regular file under ``unit`` (relative to it, sorted), the commit manifest and
    writer temporaries excluded. Symlinks and other special files are reported too (a
    verification then finds them unnamed or of the wrong kind). Reads only."""
    found: list[str] = []

    def walk(relative: str) -> None:
        base = f"{unit}/{relative}" if relative else unit
        for name in store.list(base):
            child = f"{relative}/{name}" if relative else name
            stat = store.stat(f"{unit}/{child}")
            if stat is None:
                continue
            if stat.is_dir and not stat.link:
                walk(child)
            elif child != UNIT_MANIFEST_NAME and not is_temporary_name(name):
                found.append(child)

    walk("")
    return sorted(found)


def _reason(mismatch: FileMismatch) -> str:
    """Why a unit whose file differs from its commit is damaged, in one sentence."""
    name, kind = mismatch.name, mismatch.kind
    if kind == "missing":
        return f"{name} is missing"
    if kind == "special":
        return f"{name} is a {mismatch.found_kind}, not a file"
    if kind == "size":
        return (
            f"{name} holds {mismatch.found_size} bytes, its commit recorded {mismatch.entry.size}"
        )
    return f"{name} digest {mismatch.found_digest} differs from its commit's"


def verify_unit(store: Store, unit: str, *, deep: bool = True) -> UnitVerdict:
    """The verdict on ``unit`` (see the module docstring).

    Args:
        deep: also recompute every file's digest (reads every byte); otherwise sizes only.

    Never raises for what it finds; an I/O error reading the store (not a missing file)
    propagates.
    """
    where = f"{store.describe()}/{unit}"

    def verdict(state: str, reason: str, manifest: UnitManifest | None = None) -> UnitVerdict:
        return UnitVerdict(unit, state, reason, manifest, where)

    stat = store.stat(unit)
    if stat is None:
        return verdict("absent", "no such directory")
    if not stat.is_dir:
        return verdict("damaged", "it is a file, not a checkpoint directory")
    manifest_path = f"{unit}/{UNIT_MANIFEST_NAME}"
    if store.stat(manifest_path) is None:
        present = unit_files(store, unit)
        return verdict(
            "uncommitted",
            f"no commit manifest {UNIT_MANIFEST_NAME} (holds {len(present)} file(s)): the "
            "save did not finish",
        )
    try:
        manifest = decode_unit_manifest(store.read_bytes(manifest_path), source=where)
    except (UnitDamagedError, FileNotFoundError) as exc:
        return verdict("damaged", getattr(exc, "reason", str(exc)))
    unnamed = sorted(set(unit_files(store, unit)) - set(manifest.files))
    if unnamed:
        return verdict(
            "damaged",
            f"holds file(s) its commit does not name: {unnamed[:5]} (written after the commit)",
            manifest,
        )
    mismatch = first_listed_mismatch(store, unit, manifest.files)  # every size before a digest
    for name, entry in sorted(manifest.files.items()):
        if mismatch is not None or not deep:
            break
        try:
            mismatch = listed_file_mismatch(store, f"{unit}/{name}", entry, digest=True, name=name)
        except (OSError, StatecraftError) as exc:
            return verdict("damaged", f"{name} cannot be read ({exc})", manifest)
    if mismatch is not None:
        return verdict("damaged", _reason(mismatch), manifest)
    checked = "sizes and digests" if deep else "sizes"
    return verdict("committed", f"{len(manifest.files)} file(s), {checked} match", manifest)


def require_committed(store: Store, unit: str, *, deep: bool = True) -> UnitVerdict:
    """The verdict on ``unit``, which must be committed.

    Raises:
        UnitNotCommittedError: it is absent or uncommitted (the message says which).
        UnitDamagedError: it is damaged (the message names the file and the difference).
    """
    verdict = verify_unit(store, unit, deep=deep)
    if verdict.committed:
        return verdict
    error: type[UnitError] = (
        UnitDamagedError if verdict.state == "damaged" else UnitNotCommittedError
    )
    raise error(
        f"{verdict.where} is {verdict.state}: {verdict.reason}. It is never loaded; resume "
        "from an older committed checkpoint (statecraft's last_committed_checkpoint picks one)",
        path=verdict.where,
        reason=verdict.reason,
    )
