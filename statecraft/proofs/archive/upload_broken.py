"""The deliberately wrong uploads ``specs/upload.toml`` declares (``[[broken]]``): each returns
the scenarios that run one wrong variant (a swapped table, or an effect replaced through
``Bindings.merged``), and ``statecraft crashcheck --broken`` fails unless exploring them
violates the guarantees the spec says it must."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

import attrs

from statecraft.checkpoint.archive import upload_bindings
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.archive.upload_scenarios import UploadScenario, upload_scenarios
from statecraft.resources import machine_path

__all__ = [
    "every_file_put_again",
    "local_bulk_removed_after_the_upload",
    "manifest_uploaded_first",
    "receipt_before_every_part_verified",
    "receipt_first_lets_retention_prune",
    "skip_by_name_only",
]

_MANIFEST = ".posttrain-manifest.json"


def _with(**effects: Callable[[Any], None]) -> Callable[[], Machine]:
    def build() -> Machine:
        bindings = machine_bindings("upload").merged(Bindings(effects=effects))
        return Machine(load_machine("upload").table, bindings)

    return build


def _swapped(first: str, second: str) -> Callable[[], Machine]:
    """The upload table with the effects of two transitions exchanged."""

    def build() -> Machine:
        data: dict[str, Any] = tomllib.loads(machine_path("upload").read_text())
        a = next(t for t in data["transitions"] if t["do"] == first)
        b = next(t for t in data["transitions"] if t["do"] == second)
        a["do"], b["do"] = b["do"], a["do"]
        table = parse_table(data, source="broken upload table")
        return Machine(table, machine_bindings("upload"))

    return build


def _scenario(name: str, machine: Callable[[], Machine]) -> list[UploadScenario]:
    base = next(s for s in upload_scenarios() if s.name == name)
    return [attrs.evolve(base, name=f"broken-{name}", machine_factory=machine)]


def receipt_before_every_part_verified() -> list[UploadScenario]:
    """A table that writes ``.uploaded`` before the manifest's upload and the verification of
    every part: a crash in between leaves a receipt listing a missing object."""
    return _scenario("fresh-upload", _swapped("upload_manifest", "write_receipt"))


def _manifest_first(ctx: Any) -> None:
    """Broken upload_files: the manifest goes first, then the other files."""
    by_path = {e.path: e for e in ctx.entries}
    for path in [_MANIFEST, *sorted(p for p in by_path if p[0] != ".")]:
        upload_bindings._put(ctx, by_path[path])


def manifest_uploaded_first() -> list[UploadScenario]:
    """An upload that sends the manifest before the files it lists."""
    return _scenario("fresh-upload", _with(upload_files=_manifest_first))


def _receipt_then_free_space(ctx: Any) -> None:
    """Broken write_receipt: the archived optimizer state is removed locally ("it is remote
    now")."""
    upload_bindings.write_receipt(ctx)
    ctx.store.delete(f"{ctx.iter_dir}/optim.pt")


def local_bulk_removed_after_the_upload() -> list[UploadScenario]:
    """An upload that frees local space once archived (a move, not an upload)."""
    return _scenario("fresh-upload", _with(write_receipt=_receipt_then_free_space))


def _skip_by_name(ctx: Any) -> None:
    """Broken upload_files: an object that exists remotely is skipped whatever its size."""
    for entry in ctx.entries:
        if entry.path == _MANIFEST:
            continue
        key = ctx.key(entry.path)
        if ctx.destination.bucket.stat(key) is None:
            ctx.destination.bucket.upload_from(key, ctx.store, f"{ctx.iter_dir}/{entry.path}")


def skip_by_name_only() -> list[UploadScenario]:
    """A skip that trusts a remote name without its size keeps a stale object of other bytes
    under the manifest that lists it."""
    return _scenario(
        "bulk-unhashed-over-stale-and-partial-remote", _with(upload_files=_skip_by_name)
    )


def _always_put(ctx: Any) -> None:
    """Broken upload_files: no HEAD first, every file is PUT again."""
    for entry in ctx.entries:
        if entry.path != _MANIFEST:
            key = ctx.key(entry.path)
            ctx.destination.bucket.upload_from(key, ctx.store, f"{ctx.iter_dir}/{entry.path}")


def every_file_put_again() -> list[UploadScenario]:
    """An upload without the HEAD-first skip re-sends what a crashed run already uploaded."""
    return _scenario("fresh-upload", _with(upload_files=_always_put))


def _receipt_first(ctx: Any) -> None:
    """Broken upload_files: the receipt is written before anything is uploaded."""
    upload_bindings.write_receipt(ctx)
    upload_bindings.upload_files(ctx)


def receipt_first_lets_retention_prune() -> list[UploadScenario]:
    """A receipt written before the upload lets retention (require_uploaded) prune a
    checkpoint whose archive is incomplete."""
    return _scenario(
        "older-checkpoint-then-retention-require-uploaded", _with(upload_files=_receipt_first)
    )
