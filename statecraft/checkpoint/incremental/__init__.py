"""The incremental, content-addressed checkpoint format (``checkpoint_format=incremental``):
the run-side parts over the writer (:mod:`statecraft.writers.incremental`, which stores each
large tensor once per attempt under ``checkpoints/blobs/<xxh3_128>``).

- ``references``: which blobs the iterations on disk reference, read from their manifests
  (the mark of the collection, and ``inspect``'s shared vs own bytes);
- ``gc_bindings``: the ``incremental_gc`` machine (``machines/incremental_gc.toml``): mark
  from the manifests on disk, then sweep every blob none of them names, run in the save's
  write job after retention (:func:`collect_blobs`);
- ``setup``: the writer and the collection a run's saves use.
"""

from statecraft.checkpoint.incremental.gc_bindings import GcReport, collect_blobs
from statecraft.checkpoint.incremental.references import (
    BlobReferences,
    IterationBlobs,
    referenced_blobs,
)
from statecraft.checkpoint.incremental.setup import incremental_save_parts

__all__ = [
    "BlobReferences",
    "GcReport",
    "IterationBlobs",
    "collect_blobs",
    "incremental_save_parts",
    "referenced_blobs",
]
