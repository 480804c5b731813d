"""The public checkpoint catalog: which committed checkpoints a run holds, with their step,
metrics, state, size and path, and which one is the latest or the best by a metric.

Built on the one catalog scanner (:func:`statecraft.checkpoint.kernel.catalog.scan`); it
only reads (no attempt, lease or pointer is created or moved)::

    listed = sc.checkpoints("runs/proj/group/name")   # or an output root, attempt, checkpoints/,
                                                      # a Lightning dirpath, an HF output_dir
    listed.steps                                      # [8, 6, 4, 2]  (newest first)
    listed.latest()                                   # CheckpointInfo of the newest, or None
    listed.best("val_loss", mode="min").path          # the best by a recorded metric
    sc.load_weights(model, "runs/proj/group/name", which="best:val_loss")

:mod:`~statecraft.checkpoint.catalog_api.sources` resolves what a user points at;
:mod:`~statecraft.checkpoint.catalog_api.listing` lists a run's iterations and
:mod:`~statecraft.checkpoint.catalog_api.unit_layouts` the integrations' committed units (a
Lightning ``dirpath``, an HF ``output_dir``: the one listing the integrations use too), into the
records of :mod:`~statecraft.checkpoint.catalog_api.records`;
:mod:`~statecraft.checkpoint.catalog_api.unit_weights` loads a unit's weights.
"""

from statecraft.checkpoint.catalog_api.listing import list_checkpoints
from statecraft.checkpoint.catalog_api.records import CheckpointInfo, CheckpointList, parse_which

__all__ = ["CheckpointInfo", "CheckpointList", "list_checkpoints", "parse_which"]
