"""Real artifact and checkpoint trees archived into the real S3 server, for the fetch,
prune-verified and command tests.

The trees are written by the production artifact and save machines over a real ``LocalStore``;
they are archived the way publish and upload lay them out (payloads, an artifact's archive
declaration with every file's size and sha256, the commit record last) and, for prune tests,
marked with a v1 ``.uploaded`` marker.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from statecraft.checkpoint.archive.declaration import DECLARATION_NAME, ArchiveDeclaration
from statecraft.checkpoint.archive.inventory import ArchiveEntry, archived_files
from statecraft.checkpoint.archive.marker import DestinationRecord, UploadedMarker, write_marker
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.proofs.artifacts.scenarios import artifact_context
from statecraft.proofs.save.scenarios import save_context
from statecraft.storage.local import LocalStore

ARTIFACT_ITER = 4
CHECKPOINT_ITER = 2


def make_artifact(run_dir: Path, iteration: int = ARTIFACT_ITER) -> Path:
    """``run_dir/checkpoint_artifacts/iter_N`` (a committed model+optimizer artifact)."""
    store = LocalStore(str(run_dir / "checkpoint_artifacts"))
    ctx = artifact_context(store, iteration, ("model", "optimizer"), with_data=False, salt=0)
    shipped_machine("artifact").recover(ctx).raise_for_failure()
    return run_dir / "checkpoint_artifacts" / iter_dirname(iteration)


def make_checkpoint(run_dir: Path, iteration: int = CHECKPOINT_ITER) -> Path:
    """``run_dir/checkpoints/iter_N`` (a committed full checkpoint)."""
    store = LocalStore(str(run_dir / "checkpoints"))
    shipped_machine("save").recover(
        save_context(store, iteration, with_data=False, salt=0)
    ).raise_for_failure()
    return run_dir / "checkpoints" / iter_dirname(iteration)


def entries_of(directory: Path) -> list[ArchiveEntry]:
    store = LocalStore(str(directory.parent))
    return [
        ArchiveEntry(p, s, hashlib.sha256((directory / p).read_bytes()).hexdigest())
        for p, s in archived_files(store, directory.name)
    ]


def archive(bucket, directory: Path, key_prefix: str) -> list[ArchiveEntry]:
    """Upload ``directory`` to ``key_prefix`` (declaration first for an artifact, commit
    record last); returns its entries."""
    entries = entries_of(directory)
    store = LocalStore(str(directory))
    artifact = (directory / ARTIFACT_MANIFEST_NAME).exists()
    commit = ARTIFACT_MANIFEST_NAME if artifact else MANIFEST_NAME
    if artifact:
        declaration = ArchiveDeclaration.of(int(directory.name.split("_")[1]), entries)
        bucket.put(f"{key_prefix}/{DECLARATION_NAME}", declaration.encode())
    for entry in sorted(entries, key=lambda e: (e.path == commit, e.path)):
        bucket.upload_from(f"{key_prefix}/{entry.path}", store, entry.path, sha256=entry.sha256)
    return entries


def mark(directory: Path, bucket, key_prefix: str, entries: list[ArchiveEntry]) -> UploadedMarker:
    """Write the v1 ``.uploaded`` marker of an archived artifact."""
    marker = UploadedMarker(
        kind="artifact",
        iteration=int(directory.name.split("_")[1]),
        destination=DestinationRecord.of(bucket.identity(), key_prefix),
        files=tuple(sorted(entries, key=lambda e: e.path)),
    )
    write_marker(LocalStore(str(directory)), "", marker)
    return marker


def tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative path -> bytes)."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }
