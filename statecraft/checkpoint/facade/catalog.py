"""The public catalog calls: ``statecraft.checkpoints(...)`` and ``statecraft.load_weights(...,
which=...)``, over :mod:`statecraft.checkpoint.catalog_api` and resume's weight loading.

::

    sc.checkpoints("runs/proj/group/name").best("val_loss")   # CheckpointInfo or None
    sc.checkpoints(ckpt).latest()                              # a live Checkpointer's job
    sc.load_weights(model, "runs/proj/group/name", which="best:val_loss")
"""

from __future__ import annotations

import os
from typing import Any

from statecraft.checkpoint.catalog_api import CheckpointList, list_checkpoints, parse_which
from statecraft.checkpoint.catalog_api.unit_layouts import unit_layout
from statecraft.checkpoint.catalog_api.unit_weights import load_unit_weights
from statecraft.checkpoint.facade.checkpointer import Checkpointer
from statecraft.checkpoint.resume.eval_load import LoadedCheckpoint
from statecraft.checkpoint.resume.eval_load import load_weights as _load_newest

__all__ = ["checkpoints", "load_weights"]


def checkpoints(
    source: str | os.PathLike[str] | Checkpointer, *, verify: str = "stat"
) -> CheckpointList:
    """The committed checkpoints of a run: ``source`` is an output root holding one run, a
    run dir ``<root>/<project>/<group>/<name>``, an attempt dir, a ``checkpoints/`` dir, a
    ``Checkpointer`` (its run dir: what is committed on disk now, a pending asynchronous save
    not yet), a Lightning ``ModelCheckpoint.dirpath`` or a Hugging Face ``output_dir`` (their
    committed units). Reads only.

    Args:
        verify: ``"stat"`` (default: manifests, sizes, ``trainer.pt``; nothing hashed),
            ``"size"`` or ``"digest"`` (only what verifies is listed).

    Returns:
        a :class:`~statecraft.checkpoint.catalog_api.CheckpointList`: ``steps``,
        ``latest()``, ``best(metric, mode)``, ``step(n)``; each item's step, state, metrics,
        size and path.

    Raises:
        CheckpointSourceError: the source is missing, an ``iter_*`` dir, or holds no run or
            several.
        ConfigError: ``verify`` is not one of the three.
    """
    if isinstance(source, Checkpointer):
        source = source.run_context.job_dir
    return list_checkpoints(source, verify=verify)


def load_weights(
    model: Any,
    source: str | os.PathLike[str],
    *,
    verify: str = "digest",
    which: str | int = "latest",
) -> LoadedCheckpoint:
    """Load a checkpoint's weights into ``model`` (see
    :func:`statecraft.checkpoint.resume.eval_load.load_weights` for ``source`` and the checks;
    a Lightning ``dirpath`` or an HF ``output_dir`` loads a committed unit's weights:
    :mod:`statecraft.checkpoint.catalog_api.unit_weights`).

    Args:
        verify: ``"digest"`` or ``"size"``.
        which: ``"latest"`` (the default: the newest committed checkpoint that verifies, newer
            ones that do not passed over), ``"best:<metric>"`` (the lowest recorded value;
            ``"best:<metric>:max"`` the highest), or a step number; anything but ``latest``
            is chosen from :func:`checkpoints` and must then verify (no fallback).

    Raises:
        what the resume loader raises; ConfigError: ``which`` does not parse; CheckpointError:
        nothing matches ``which``.
    """
    parse_which(which)  # a malformed selection is refused before anything is read
    layout = unit_layout(source) if isinstance(source, str | os.PathLike) else None
    if layout is not None:
        unit = load_unit_weights(model, source, layout, which=which, verify=verify)
        return LoadedCheckpoint(str(unit.unit), unit.step, {}, "checkpoint")
    if which == "latest":
        return _load_newest(model, source, verify=verify)
    chosen = list_checkpoints(source).select(which)
    return _load_newest(model, chosen.path, verify=verify)
