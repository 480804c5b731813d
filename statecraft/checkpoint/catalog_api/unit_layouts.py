"""The committed units of the framework integrations, listed as checkpoints: a Lightning
``ModelCheckpoint.dirpath`` and a Hugging Face ``Trainer`` ``output_dir``.

- **Lightning**: each checkpoint path ``<dirpath>/<name>.ckpt`` has a slot
  ``<dirpath>/.statecraft/<name>.ckpt/`` of generations ``g<8 digits>/``, each a committed unit
  (:mod:`statecraft.checkpoint.units`) holding ``checkpoint.pt``; the path itself is a link to
  the newest committed generation's file. The layout before the link keeps the slot at the
  path itself (a directory of generations). A checkpoint is its slot's newest generation that
  verifies; its step is the recorded ``global_step``, its metric the ``ModelCheckpoint``
  monitor's score the plugin recorded at the save (``monitor`` / ``monitor_score`` in the
  commit manifest's ``meta``; a ``last.ckpt`` or a checkpoint without a monitor has none).
- **Hugging Face**: each ``<output_dir>/checkpoint-N`` folder is a unit; its metrics are the
  values its own ``trainer_state.json`` logged at step N (``eval_loss``, ``loss``, ...), and
  ``best_metric`` when it is the recorded ``best_model_checkpoint``.

This is the one listing of those layouts: :func:`statecraft.checkpoints`, the Lightning
plugin's resume of ``last`` and the HF callback's folder checks and pruning read through it.
Reads only (nothing is created, settled or moved). Uncommitted and damaged units are never
listed as committed.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.catalog_api.records import CheckpointInfo
from statecraft.checkpoint.units import UnitVerdict, newest_committed, verify_unit
from statecraft.checkpoint.units.generations import generation_units
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = [
    "HF_FRAMEWORK",
    "HF_PREFIX",
    "LIGHTNING_FILE",
    "LIGHTNING_FRAMEWORK",
    "LIGHTNING_SLOTS_DIR",
    "MONITOR_META",
    "MONITOR_SCORE_META",
    "Slot",
    "hf_folders",
    "hf_metrics",
    "lightning_slots",
    "unit_infos",
    "unit_layout",
]

LIGHTNING_SLOTS_DIR = ".statecraft"
"""The hidden directory beside Lightning's checkpoints that holds their slots."""
LIGHTNING_FILE = "checkpoint.pt"
"""The payload file of every Lightning generation: the checkpoint dict Lightning built."""
LIGHTNING_FRAMEWORK = "lightning"
HF_FRAMEWORK = "hf-trainer"
HF_PREFIX = "checkpoint"
"""``transformers.trainer_utils.PREFIX_CHECKPOINT_DIR``: the folders are ``checkpoint-N``."""
MONITOR_META = "monitor"
"""The commit manifest ``meta`` key of a Lightning checkpoint's ``ModelCheckpoint.monitor``."""
MONITOR_SCORE_META = "monitor_score"
"""... and of its score (``best_k_models[path]``, the value ``best_model_score`` reports)."""

_HF_FOLDER = re.compile(rf"^{HF_PREFIX}-(\d+)$")
_HF_STATE = "trainer_state.json"
_NOT_METRICS = frozenset({"step", "epoch"})
_OS = OsFilesystem()


@attrs.frozen
class Slot:
    """One Lightning checkpoint path and its slot.

    Attributes:
        name: the checkpoint's file name (``epoch=1-step=8.ckpt``), the slot's name.
        familiar: the path Lightning saved to (``<dirpath>/<name>``).
        root: the directory holding the slot (``<dirpath>/.statecraft``; for the layout before
            the link, ``<dirpath>``).
        legacy: the slot is a directory at the familiar path itself.
        verdict: its newest generation that verifies at the level asked (``None``: none does).
        passed: the newer generations passed over, newest first.
        mtime: the modification time of the chosen generation (0.0 without one).
    """

    name: str
    familiar: str
    root: str
    legacy: bool
    verdict: UnitVerdict | None
    passed: tuple[UnitVerdict, ...]
    mtime: float

    @property
    def step(self) -> int:
        """The committed generation's recorded step (``-1``: none recorded, or no commit)."""
        step = self.verdict.step if self.verdict is not None else None
        return -1 if step is None else step


def _is_dir(fs: Filesystem, path: str) -> bool:
    stat = fs.stat(path)
    return stat is not None and stat.is_dir and not stat.link


def _slots_in(fs: Filesystem, root: str) -> list[tuple[str, list[str]]]:
    """``(name, generations newest first)`` of every slot directory directly in ``root``."""
    if not _is_dir(fs, root):
        return []
    store: Store | None = None
    found = []
    for name in sorted(fs.listdir(root)):
        full = posixpath.join(root, name)
        if name == LIGHTNING_SLOTS_DIR or os.path.islink(full) or not _is_dir(fs, full):
            continue  # a save_last="link" symlink names a slot listed under its own name
        store = store if store is not None else LocalStore(root, fs=fs)
        units = generation_units(store, name)
        if units:
            found.append((name, units))
    return found


def lightning_slots(
    dirpath: str | os.PathLike[str], *, deep: bool = False, fs: Filesystem | None = None
) -> list[Slot]:
    """Every Lightning slot of the checkpoints in ``dirpath`` (in ``.statecraft/``, and
    legacy slot directories beside them), newest first: by the committed generation's step,
    then its mtime (a ``last.ckpt`` and a top-k checkpoint of one step hold the same state);
    slots without a committed generation last. ``[]`` when ``dirpath`` is not a directory.
    Reads only (``deep``: every digest, else sizes)."""
    fs = fs if fs is not None else _OS
    directory = posixpath.normpath(os.path.abspath(os.fspath(dirpath)))
    found: list[Slot] = []
    roots = ((posixpath.join(directory, LIGHTNING_SLOTS_DIR), False), (directory, True))
    for root, legacy in roots:
        for name, units in _slots_in(fs, root):
            store = LocalStore(root, fs=fs)
            verdict, passed = newest_committed(store, units, deep=deep, settle=False)
            mtime = os.stat(store.abspath(verdict.unit)).st_mtime if verdict is not None else 0.0
            familiar = posixpath.join(directory, name)
            found.append(Slot(name, familiar, root, legacy, verdict, tuple(passed), mtime))
    return sorted(found, key=lambda s: (s.verdict is not None, s.step, s.mtime), reverse=True)


def hf_folders(store: Store) -> list[tuple[int, str]]:
    """The ``checkpoint-N`` directories at the root of ``store`` (a Trainer's ``output_dir``)
    as ``(N, name)``, newest (largest N) first, committed or not. Ordered by N, never by
    mtime (the Trainer's own rotation sorts by mtime). Reads only."""
    found = []
    for name in store.list(""):
        match = _HF_FOLDER.match(name)
        stat = store.stat(name) if match is not None else None
        if match is not None and stat is not None and stat.is_dir:
            found.append((int(match.group(1)), name))
    return sorted(found, reverse=True)


def unit_layout(path: str | os.PathLike[str], *, fs: Filesystem | None = None) -> str | None:
    """``"lightning"`` when ``path`` is a directory holding Lightning slots, ``"hf-trainer"``
    when it holds ``checkpoint-N`` folders, else ``None`` (not a framework's checkpoint
    directory, or none saved yet). Reads only."""
    fs = fs if fs is not None else _OS
    directory = posixpath.normpath(os.path.abspath(os.fspath(path)))
    if not _is_dir(fs, directory):
        return None
    if _slots_in(fs, posixpath.join(directory, LIGHTNING_SLOTS_DIR)) or _slots_in(fs, directory):
        return LIGHTNING_FRAMEWORK
    if hf_folders(LocalStore(directory, fs=fs)):
        return HF_FRAMEWORK
    return None


def _lightning_metrics(meta: Mapping[str, Any]) -> dict[str, float]:
    monitor, score = meta.get(MONITOR_META), meta.get(MONITOR_SCORE_META)
    if isinstance(monitor, str) and monitor and isinstance(score, int | float):
        return {monitor: float(score)}
    return {}


def hf_metrics(state: Mapping[str, Any], step: int, name: str) -> dict[str, float]:
    """The metrics of folder ``name`` (step ``step``) from its ``trainer_state.json``
    (``state``): every finite number ``log_history`` logged at that step (later entries win;
    not ``step`` / ``epoch``), and ``best_metric`` (the ``metric_for_best_model`` value) when
    the folder is the recorded ``best_model_checkpoint``."""
    metrics: dict[str, float] = {}
    for entry in state.get("log_history") or []:
        if isinstance(entry, dict) and entry.get("step") == step:
            for key, value in entry.items():
                if key not in _NOT_METRICS and _finite(value):
                    metrics[key] = float(value)
    best, best_path = state.get("best_metric"), state.get("best_model_checkpoint")
    is_best = isinstance(best_path, str) and posixpath.basename(best_path.rstrip("/")) == name
    if is_best and isinstance(best, int | float) and _finite(best):
        metrics.setdefault("best_metric", float(best))
    return metrics


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _hf_state(store: Store, name: str) -> Mapping[str, Any]:
    try:
        loaded = json.loads(store.read_bytes(f"{name}/{_HF_STATE}"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _hf_infos(directory: str, deep: bool) -> list[CheckpointInfo]:
    store = LocalStore(directory)
    infos = []
    for step, name in hf_folders(store):
        verdict = verify_unit(store, name, deep=deep)
        if not verdict.committed or verdict.manifest is None:
            continue
        recorded = verdict.manifest.step if verdict.manifest.step is not None else step
        metrics = hf_metrics(_hf_state(store, name), recorded, name)
        path = Path(directory) / name
        size = verdict.manifest.size
        infos.append(CheckpointInfo(recorded, "committed", metrics, size, path, None, HF_FRAMEWORK))
    return infos


def _lightning_infos(directory: str, deep: bool) -> list[CheckpointInfo]:
    infos = []
    for slot in lightning_slots(directory, deep=deep):
        manifest = slot.verdict.manifest if slot.verdict is not None else None
        if slot.verdict is None or manifest is None:
            continue
        infos.append(
            CheckpointInfo(
                slot.step,
                "committed",
                _lightning_metrics(manifest.meta),
                manifest.size,
                Path(slot.familiar),
                None,
                LIGHTNING_FRAMEWORK,
                Path(slot.root) / slot.verdict.unit,
            )
        )
    return infos


def unit_infos(path: str | os.PathLike[str], layout: str, *, verify: str) -> list[CheckpointInfo]:
    """The committed checkpoints of the framework directory ``path`` (``layout`` as
    :func:`unit_layout` said), newest first; ``verify="digest"`` checks every digest, the
    other levels sizes."""
    directory = posixpath.normpath(os.path.abspath(os.fspath(path)))
    deep = verify == "digest"
    if layout == LIGHTNING_FRAMEWORK:
        return _lightning_infos(directory, deep)
    return _hf_infos(directory, deep)
