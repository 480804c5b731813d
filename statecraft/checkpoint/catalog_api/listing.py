"""Listing a run's committed checkpoints, and selecting the latest or the best one.

Each checkpoints directory is read by the one catalog scanner
(:func:`~statecraft.checkpoint.kernel.catalog.scan`): at depth ``STAT`` by default (the
manifest, a ``stat`` of every recorded file, ``trainer.pt`` and the validation records; no
bulk file hashed, retention's reading), or verified at ``verify="size"`` / ``"digest"``.
Only committed checkpoints are listed: committed, the validation stages (pending or
published) and weights-only ones (``state`` says which); partial, corrupt and invalidated
directories never are. The metrics are the evaluated record's (a durable validation:
``validation.save_checkpoint=true``), the ones ``BestN`` retention judges.

Anchors' names: Orbax's ``all_steps()`` / ``latest_step()`` / ``best_step()`` are
:attr:`CheckpointList.steps`, :meth:`CheckpointList.latest` and :meth:`CheckpointList.best`;
Lightning's ``best_model_path`` / ``best_model_score`` are ``best(metric).path`` and
``best(metric).metrics[metric]``.
"""

from __future__ import annotations

import os

from statecraft.checkpoint.catalog_api.records import (
    VERIFY_LEVELS,
    CheckpointInfo,
    CheckpointList,
)
from statecraft.checkpoint.catalog_api.sources import CheckpointsDir, resolve
from statecraft.checkpoint.catalog_api.unit_layouts import unit_infos, unit_layout
from statecraft.checkpoint.kernel.catalog import CatalogEntry, CheckpointState, Depth, scan
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.verify import OPTIMIZER_ENTRIES, read_manifest
from statecraft.errors import CheckpointError, ConfigError, ConfigIssue
from statecraft.storage.local import LocalStore

__all__ = ["list_checkpoints"]

_LISTED = frozenset(
    {
        CheckpointState.COMMITTED,
        CheckpointState.EVALUATION_PENDING,
        CheckpointState.PUBLICATION_PENDING,
        CheckpointState.PUBLISHED,
        CheckpointState.WEIGHTS_ONLY,
    }
)


def _size(store: LocalStore, entry: CatalogEntry) -> int:
    manifest = read_manifest(store, entry.iteration)
    pruned = entry.state is CheckpointState.WEIGHTS_ONLY
    return sum(
        recorded.size
        for name, recorded in manifest.files.items()
        if not (pruned and name.split("/", 1)[0] in OPTIMIZER_ENTRIES)
    )


def _listed(directory: CheckpointsDir, verify: str) -> list[CheckpointInfo]:
    store = LocalStore(str(directory.path.resolve()))
    if verify == "stat":
        catalog = scan(store, depth=Depth.STAT)
    else:
        catalog = scan(store, level=verify, keep_payloads=False)
    found = []
    for entry in catalog.entries():
        if entry.state not in _LISTED:
            continue
        try:
            size = _size(store, entry)
        except (OSError, CheckpointError):  # removed since it was read (a retention pass)
            continue
        found.append(
            CheckpointInfo(
                entry.iteration,
                entry.state.value,
                dict(entry.metrics or {}),
                size,
                directory.path / iter_dirname(entry.iteration),
                directory.attempt,
            )
        )
    return found


def list_checkpoints(source: str | os.PathLike[str], *, verify: str = "stat") -> CheckpointList:
    """The committed checkpoints under ``source`` (see
    :func:`~statecraft.checkpoint.catalog_api.sources.resolve`), newest attempt first; for a
    Lightning ``ModelCheckpoint.dirpath`` or a Hugging Face ``output_dir``, its committed
    units, newest first (:mod:`~statecraft.checkpoint.catalog_api.unit_layouts`).

    Args:
        verify: ``"stat"`` (the default: manifests, file sizes, ``trainer.pt``; nothing
            hashed), ``"size"`` or ``"digest"`` (verified; what does not verify is not listed).

    Raises:
        CheckpointSourceError: as :func:`~statecraft.checkpoint.catalog_api.sources.resolve`.
        ConfigError: ``verify`` is not one of the three.
    """
    if verify not in VERIFY_LEVELS:
        raise ConfigError(
            [ConfigIssue("verify", verify, "'stat', 'size' or 'digest'")], source="checkpoints()"
        )
    layout = unit_layout(source) if isinstance(source, str | os.PathLike) else None
    if layout is not None:  # a Lightning dirpath or an HF output_dir
        return CheckpointList(os.fspath(source), tuple(unit_infos(source, layout, verify=verify)))
    items = [info for d in resolve(source) for info in _listed(d, verify)]
    return CheckpointList(os.fspath(source), tuple(items))
