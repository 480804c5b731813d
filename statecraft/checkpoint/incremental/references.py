"""Which blobs the iterations of a checkpoints root reference, read from disk every time
(never from a count kept in memory): the mark of the blob collection and ``inspect``'s
shared vs own bytes.

A committed iteration (one holding its manifest) of format ``incremental`` references the
blobs its manifest lists under ``blobs:<entry>`` for each entry whose file is still there
(retention's weights-only pruning removes ``optim.pt``; its blobs are then no longer
needed). An iteration without a manifest (a save in progress or interrupted) references the
blobs its component files name, when they load; one that does not load cannot be committed
as it is (the save's recover clears and rewrites it), so it references nothing.
"""

from __future__ import annotations

import attrs
import torch

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, parse_iter_dirname
from statecraft.checkpoint.kernel.verify import read_manifest
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store
from statecraft.writers.blobs import iter_refs, ref_chunks
from statecraft.writers.incremental import BLOBS_KEY_PREFIX, BULK_ENTRIES, parse_blob_list

__all__ = ["BlobReferences", "IterationBlobs", "referenced_blobs"]


@attrs.frozen
class IterationBlobs:
    """The blobs one iteration references (digest -> size) and whether it is committed."""

    iteration: int
    committed: bool
    blobs: dict[str, int]


@attrs.frozen
class BlobReferences:
    """Every iteration's references (``iterations``, oldest first)."""

    iterations: tuple[IterationBlobs, ...]

    @property
    def live(self) -> frozenset[str]:
        """Every blob some iteration references."""
        return frozenset(d for it in self.iterations for d in it.blobs)

    def shared_and_own(self, iteration: int) -> tuple[int, int]:
        """``(shared, own)`` bytes of ``iteration``'s blobs: referenced by another committed
        iteration too, or by it alone."""
        mine = next(it for it in self.iterations if it.iteration == iteration)
        others = {d for it in self.iterations if it is not mine and it.committed for d in it.blobs}
        shared = sum(s for d, s in mine.blobs.items() if d in others)
        return shared, sum(mine.blobs.values()) - shared


def _uncommitted_blobs(store: Store, directory: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for entry in BULK_ENTRIES:
        path = f"{directory}/{entry}"
        if store.stat(path) is None:
            continue
        try:
            with store.open_read(path) as handle:
                payload = torch.load(handle, weights_only=True, map_location="cpu")
        except Exception:
            continue
        for ref in iter_refs(payload):
            found.update(ref_chunks(ref))
    return found


def referenced_blobs(store: Store) -> BlobReferences:
    """Read the references of every ``iter_*`` directory of ``store`` (a checkpoints root).

    Raises:
        CheckpointCorruptError: a committed iteration's manifest (or its blob list) is
            malformed: nothing can be said about what it needs, so nothing may be swept.
    """
    out: list[IterationBlobs] = []
    for name in store.list(""):
        iteration = parse_iter_dirname(name)
        if iteration is None:
            continue
        if store.stat(f"{name}/{MANIFEST_NAME}") is None:
            out.append(IterationBlobs(iteration, False, _uncommitted_blobs(store, name)))
            continue
        manifest = read_manifest(store, iteration)
        blobs: dict[str, int] = {}
        if manifest.format == "incremental":
            for key, value in manifest.writer.items():
                entry = key.removeprefix(BLOBS_KEY_PREFIX)
                if key == entry or store.stat(f"{name}/{entry}") is None:
                    continue
                try:
                    blobs.update(parse_blob_list(value))
                except ValueError as exc:
                    raise CheckpointCorruptError(
                        f"{store.describe()}/{name}/{MANIFEST_NAME}",
                        f"its blob list for {entry} is malformed ({exc})",
                        "Move the iteration aside; no blob was collected.",
                    ) from None
        out.append(IterationBlobs(iteration, True, blobs))
    return BlobReferences(tuple(sorted(out, key=lambda it: it.iteration)))
