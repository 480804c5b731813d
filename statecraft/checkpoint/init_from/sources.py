"""What an ``init_from`` source is, and reading its weights: :func:`open_source`.

A source is recognised by what it is on disk (``s3://`` sources are staged first:
:mod:`statecraft.checkpoint.init_from.remote`):

========================================  =================================================
a ``.safetensors`` file, or a directory   a Hugging Face / safetensors source: the file, or
holding ``model.safetensors`` or          every shard its index lists (tensors are read
``model.safetensors.index.json``          lazily, only after the keys and shapes fit)
a directory holding ``.metadata``         a DCP directory (``torch.distributed.checkpoint``);
                                          read into scratch tensors shaped by the source
any other file                            a plain ``torch.save``-d state dict (``str`` ->
                                          tensor), read with ``weights_only=True``
any other directory                       a statecraft source, as ``statecraft.load_weights``
                                          reads it: a run or attempt (its newest committed
                                          checkpoint that verifies), an ``iter_*`` checkpoint,
                                          a partial artifact with ``model``; ``model.pt`` and
                                          ``trainer.pt`` are verified against the manifest's
                                          digests (``verify="digest"``); ``optim.pt`` is never
                                          read
========================================  =================================================

Only weights are ever read: no optimizer, clock, RNG, data cursor or validation state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from statecraft.errors import InitFromError, StatecraftError

__all__ = ["SourceWeights", "open_source"]

_SAFETENSORS = "model.safetensors"
_SAFETENSORS_INDEX = "model.safetensors.index.json"
_DCP_METADATA = ".metadata"


@attrs.frozen
class SourceWeights:
    """A source's entries and shapes, and how to read the tensors of some of them.

    Attributes:
        where: the source as the messages name it.
        kind: ``"checkpoint"`` / ``"artifact"`` (statecraft), ``"torch"``, ``"safetensors"``,
            ``"dcp"``.
        shapes: entry name -> shape.
        read: ``read(names) -> {name: tensor}`` for the names asked (only after they fit).
        iteration: a statecraft source's step, else ``None``.
    """

    where: str
    kind: str
    shapes: dict[str, tuple[int, ...]]
    read: Callable[[Iterable[str]], dict[str, torch.Tensor]] = attrs.field(repr=False)
    iteration: int | None = None


def _in_memory(where: str, kind: str, state: Any, iteration: int | None = None) -> SourceWeights:
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise InitFromError(
            f"init_from {where}: holds a {type(state).__name__}, not a state dict of str -> "
            "tensor; save model.state_dict() itself (not a dict wrapping it, an optimizer "
            "or a whole module) or point at a statecraft checkpoint",
            source=where,
        )
    tensors = dict(state)
    return SourceWeights(
        where,
        kind,
        {k: tuple(v.shape) for k, v in tensors.items()},
        lambda names: {n: tensors[n] for n in names},
        iteration,
    )


def _torch_file(path: Path, where: str) -> SourceWeights:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # not a torch archive, or unsafe pickles
        raise InitFromError(
            f"init_from {where}: is not a torch.save file of tensors that "
            f"torch.load(weights_only=True) reads ({type(exc).__name__}: {exc}); point at a "
            "state dict file, a safetensors file or directory, a DCP directory or a "
            "statecraft checkpoint",
            source=where,
        ) from None
    return _in_memory(where, "torch", state)


def _safetensors_files(path: Path, where: str) -> list[Path]:
    if path.is_file():
        return [path]
    if (path / _SAFETENSORS).is_file():
        return [path / _SAFETENSORS]
    try:
        index = json.loads((path / _SAFETENSORS_INDEX).read_text(encoding="utf-8"))
        shards = sorted(set(index["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InitFromError(
            f"init_from {where}: {_SAFETENSORS_INDEX} is not a readable index with a "
            f"weight_map ({exc}); restore it from the source's export",
            source=where,
        ) from None
    missing = [s for s in shards if not (path / s).is_file()]
    if missing:
        raise InitFromError(
            f"init_from {where}: the index lists shards that are not there: {missing}; "
            "download every shard",
            source=where,
        )
    return [path / s for s in shards]


def _safetensors(path: Path, where: str) -> SourceWeights:
    try:
        from safetensors import safe_open
    except ImportError:  # pragma: no cover - safetensors is a dependency of transformers
        raise InitFromError(
            f"init_from {where}: reading safetensors needs the safetensors package; "
            "pip install safetensors",
            source=where,
        ) from None
    located: dict[str, Path] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for file in _safetensors_files(path, where):
        try:
            with safe_open(str(file), framework="pt") as opened:
                for name in opened.keys():  # noqa: SIM118 - safe_open has no __iter__
                    if name in located:
                        raise InitFromError(
                            f"init_from {where}: {name!r} is in two shards "
                            f"({located[name].name}, {file.name}); re-export the source",
                            source=where,
                        )
                    located[name] = file
                    shapes[name] = tuple(opened.get_slice(name).get_shape())
        except StatecraftError:
            raise
        except Exception as exc:  # a truncated or foreign file
            raise InitFromError(
                f"init_from {where}: {file.name} is not a readable safetensors file "
                f"({type(exc).__name__}: {exc}); re-download it",
                source=where,
            ) from None

    def read(names: Iterable[str]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        by_file: dict[Path, list[str]] = {}
        for name in names:
            by_file.setdefault(located[name], []).append(name)
        for file, wanted in by_file.items():
            with safe_open(str(file), framework="pt") as opened:
                out.update({n: opened.get_tensor(n) for n in wanted})
        return out

    return SourceWeights(where, "safetensors", shapes, read)


def _dcp(path: Path, where: str) -> SourceWeights:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from statecraft.storage.local import LocalStore
    from statecraft.writers.dcp import load_dcp_state
    from statecraft.writers.dcp_store_reader import StoreStorageReader

    store = LocalStore(str(path.parent))
    try:
        items = StoreStorageReader(store, path.name).read_metadata().state_dict_metadata
    except StatecraftError as exc:
        raise InitFromError(
            f"init_from {where}: its DCP .metadata is unreadable ({exc}); copy the whole DCP "
            "directory again",
            source=where,
        ) from None
    tensors = {k: v for k, v in items.items() if isinstance(v, TensorStorageMetadata)}

    def read(names: Iterable[str]) -> dict[str, torch.Tensor]:
        target = {
            n: torch.empty(tuple(tensors[n].size), dtype=tensors[n].properties.dtype) for n in names
        }
        load_dcp_state(store, path.name, target)  # item digests checked where recorded
        return target

    shapes = {k: tuple(v.size) for k, v in tensors.items()}
    shapes.update({k: (-1,) for k in items if k not in tensors})  # a non-tensor item: fits none
    return SourceWeights(where, "dcp", shapes, read)


def _statecraft(path: Path, where: str, verify: str) -> SourceWeights:
    from statecraft.checkpoint.resume.eval_load import read_model_state

    state, loaded = read_model_state(path, verify=verify)
    described = f"{where} ({loaded.location})"
    if state is None:  # checkpoint_format=dcp: verify model/'s digests, then read it as DCP
        _verify_dcp_model(Path(loaded.location), loaded.iteration, loaded.kind, verify)
        weights = _dcp(Path(loaded.location) / "model", described)
        return attrs.evolve(weights, kind=loaded.kind, iteration=loaded.iteration)
    return _in_memory(described, loaded.kind, state, loaded.iteration)


def _verify_dcp_model(location: Path, iteration: int, kind: str, verify: str) -> None:
    """Every file of the ``model/`` entry of a DCP checkpoint or artifact against its
    manifest's digests (the model-only reading hashes ``model.pt``, which DCP has not).

    Raises:
        CheckpointCorruptError: a shard is missing, short, or holds other bytes.
    """
    from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
    from statecraft.checkpoint.kernel.verify import verify_checkpoint
    from statecraft.storage.local import LocalStore

    store = LocalStore(str(location.parent))
    if kind == "artifact":
        verify_artifact(store, iteration, level=verify, keep_payloads=False, only=("model",))
    else:
        verify_checkpoint(store, iteration, level=verify, keep_payloads=False, only=("model",))


def open_source(source: str | os.PathLike[str], *, verify: str = "digest") -> SourceWeights:
    """Recognise the local ``source`` (see the module table) and list its entries.

    Raises:
        InitFromError: ``source`` does not exist, or is a file or directory of a known kind
            that cannot be read (naming it and the fix).
        CheckpointSourceError / CheckpointCorruptError / TrainerStateError: a statecraft
            source holds no committed checkpoint that verifies.
    """
    where = str(source)
    path = Path(source).expanduser()
    if not path.exists():
        raise InitFromError(
            f"init_from {where}: no such file or directory; point at a statecraft checkpoint "
            "or run, a torch state dict file, a safetensors file or directory, a DCP "
            "directory, or an s3:// archived checkpoint",
            source=where,
        )
    if path.is_file():
        return (
            _safetensors(path, where) if path.suffix == ".safetensors" else _torch_file(path, where)
        )
    if (path / _SAFETENSORS).is_file() or (path / _SAFETENSORS_INDEX).is_file():
        return _safetensors(path, where)
    if (path / _DCP_METADATA).is_file():
        return _dcp(path, where)
    return _statecraft(path, where, verify)
