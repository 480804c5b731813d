"""Loading the model weights of a framework integration's committed unit:
``sc.load_weights(model, <Lightning dirpath | HF output_dir>, which=...)``.

The unit is chosen from the one listing (:mod:`~statecraft.checkpoint.catalog_api.unit_layouts`),
verified again (``verify="digest"``: every digest; ``"size"``: sizes) and only then read:

- **Lightning**: ``checkpoint.pt``'s ``state_dict`` (``torch.load(weights_only=True)``), for the
  ``LightningModule`` that saved it;
- **Hugging Face**: ``model.safetensors`` (or its shards by ``model.safetensors.index.json``), or
  ``pytorch_model.bin``, for the ``PreTrainedModel`` that saved it; a weight the Trainer left out
  because it is tied to a saved one (``lm_head.weight`` to the embedding) is taken from its twin.

Before anything loads, the state is checked against the model (names, shapes, dtypes:
:func:`~statecraft.checkpoint.kernel.compatibility.check_fit`); a misfit changes nothing.
``which="latest"`` passes over a newest unit that no longer verifies (logged) as
``load_weights`` does for a run; a unit named by ``best:<metric>`` or a step must verify.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
from pathlib import Path
from typing import Any

import attrs
import torch

from statecraft.checkpoint.catalog_api.records import CheckpointInfo, CheckpointList, parse_which
from statecraft.checkpoint.catalog_api.unit_layouts import (
    LIGHTNING_FILE,
    LIGHTNING_FRAMEWORK,
    unit_infos,
)
from statecraft.checkpoint.kernel.compatibility import check_fit
from statecraft.checkpoint.kernel.loading import Components
from statecraft.checkpoint.units import verify_unit
from statecraft.errors import (
    CheckpointError,
    CheckpointSourceError,
    ConfigError,
    ConfigIssue,
    UnitDamagedError,
    UnitNotCommittedError,
)
from statecraft.logs import LOGGER_NAME
from statecraft.storage.local import LocalStore

__all__ = ["load_unit_weights"]

log = logging.getLogger(f"{LOGGER_NAME}.catalog")

_SAFETENSORS = "model.safetensors"
_SAFETENSORS_INDEX = "model.safetensors.index.json"
_TORCH_BIN = "pytorch_model.bin"


@attrs.frozen
class _Model:
    """What the compatibility check needs of the tracked objects: a model, no optimizer."""

    model: Any
    optimizer: Any = None


def _verified(info: CheckpointInfo, deep: bool, *, fallback: bool) -> bool:
    verdict = verify_unit(LocalStore(str(info.unit.parent)), info.unit.name, deep=deep)
    if verdict.committed:
        return True
    if fallback:
        log.warning("passing over %s: %s (%s)", info.path, verdict.state, verdict.reason)
        return False
    error = UnitDamagedError if verdict.state == "damaged" else UnitNotCommittedError
    raise error(
        f"{info.path} does not verify ({verdict.state}: {verdict.reason}); nothing was loaded. "
        "Pick another checkpoint from statecraft.checkpoints(...)",
        path=str(info.path),
        reason=verdict.reason,
    )


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: holds objects torch.load(weights_only=True) refuses ({exc}); nothing was "
            "loaded. Load it with the framework's own loader (LightningModule."
            "load_from_checkpoint(path), from_pretrained(dir)) if you trust it"
        ) from exc


def _hf_state(unit: Path) -> dict[str, Any]:
    if (unit / _SAFETENSORS).is_file() or (unit / _SAFETENSORS_INDEX).is_file():
        from safetensors.torch import load_file

        if (unit / _SAFETENSORS).is_file():
            return dict(load_file(str(unit / _SAFETENSORS)))
        index = json.loads((unit / _SAFETENSORS_INDEX).read_text())
        state: dict[str, Any] = {}
        for shard in sorted(set(index.get("weight_map", {}).values())):
            state.update(load_file(str(unit / shard)))
        return state
    if (unit / _TORCH_BIN).is_file():
        return dict(_torch_load(unit / _TORCH_BIN))
    raise CheckpointError(
        f"{unit}: holds no model weights ({_SAFETENSORS}, {_SAFETENSORS_INDEX} or {_TORCH_BIN}); "
        "nothing was loaded"
    )


def _state(info: CheckpointInfo) -> dict[str, Any]:
    if info.framework == LIGHTNING_FRAMEWORK:
        loaded = _torch_load(info.unit / LIGHTNING_FILE)
        state = loaded.get("state_dict") if isinstance(loaded, dict) else None
        if not isinstance(state, dict):
            raise CheckpointError(f"{info.path}: its checkpoint holds no state_dict")
        return state
    return _hf_state(info.unit)


def _tie(model: Any, state: dict[str, Any]) -> None:
    """Add each weight the saver left out because it shares storage with a saved one in the
    model (tied embeddings), as that saved tensor."""
    live = model.state_dict() if hasattr(model, "state_dict") else {}
    owners: dict[int, str] = {}
    for name, tensor in live.items():
        if name in state and isinstance(tensor, torch.Tensor):
            owners.setdefault(tensor.data_ptr(), name)
    for name, tensor in live.items():
        if name not in state and isinstance(tensor, torch.Tensor):
            twin = owners.get(tensor.data_ptr())
            if twin is not None:
                state[name] = state[twin]


def load_unit_weights(
    model: Any, source: str | os.PathLike[str], layout: str, *, which: str | int, verify: str
) -> CheckpointInfo:
    """Load the weights of the unit ``which`` names under the framework directory ``source``
    into ``model`` (see the module docstring); return it.

    Raises:
        ConfigError: ``verify`` is not ``"digest"`` or ``"size"``; ``which`` does not parse.
        CheckpointSourceError: no listed unit verifies (``which="latest"``).
        CheckpointError: nothing matches ``which``; the unit holds no model weights.
        UnitDamagedError / UnitNotCommittedError: the unit ``which`` named does not verify.
        ResumeError: the model does not fit the weights (the model is unchanged).
    """
    if verify not in ("digest", "size"):
        raise ConfigError([ConfigIssue("verify", verify, "'digest' or 'size'")],
                          source="load_weights()")  # fmt: skip
    kind = parse_which(which)[0]
    listed = CheckpointList(os.fspath(source), tuple(unit_infos(source, layout, verify="size")))
    candidates = list(listed) if kind == "latest" else [listed.select(which)]
    deep = verify == "digest"
    chosen = next((i for i in candidates if _verified(i, deep, fallback=kind == "latest")), None)
    if chosen is None:
        raise CheckpointSourceError(
            f"{os.fspath(source)}: no committed {layout} checkpoint verifies "
            f"({len(candidates)} listed); nothing was loaded",
            source=os.fspath(source),
            runs=[],
        )
    state = _state(chosen)
    _tie(model, state)
    check_fit(_Model(model), None, Components(state, None, None), location=str(chosen.path))
    model.load_state_dict(state)
    log.info("loaded the weights of %s (%s, step %d)", chosen.path, chosen.unit, chosen.step)
    return chosen
