"""Reading one committed checkpoint of a direct object-store root (reads only).

:func:`read_direct_checkpoint` verifies iteration N before anything loads: the manifest is
read and checked (schema, iteration); every object it names is HEADed (present, its size);
the control files of the active generation are read whole and checked against their recorded
digests (``trainer.pt``, ``data.pt``). :func:`read_dcp_components` then reads the DCP
components IN PLACE by ranged GETs through ``StoreStorageReader`` (each item's xxh3 digest
verified; nothing is downloaded to a local cache) into scratch targets shaped by the live
objects (``dcp_state``; DCP's load planner reshards when the world size differs; a pristine
optimizer is reset and given its saved group options first). Nothing live changes here but
that reset; the resume machine applies the components all or nothing
(:mod:`statecraft.checkpoint.direct.resume`).

Failure modes: ``ResumeError`` (an explicit iteration holds no manifest, a component the live
objects need was not saved), ``CheckpointCorruptError`` (a malformed manifest, a missing
``.metadata``, a missing generation or object, a truncated or bit-flipped shard named with its
item, a control file of another digest), ``ObjectRequestError`` (the bucket did not answer).
"""

from __future__ import annotations

import io
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

from statecraft.checkpoint.direct.manifest import DirectManifest, decode_direct_manifest
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.loading import Components, _pristine_groups
from statecraft.checkpoint.state import DataState, TrainerState
from statecraft.errors import CheckpointCorruptError, ResumeError
from statecraft.storage.base import Store
from statecraft.storage.digest import Digest
from statecraft.writers.dcp_failures import unwrap_checkpoint_exception
from statecraft.writers.dcp_store_reader import StoreStorageReader

__all__ = ["DirectCheckpoint", "read_dcp_components", "read_direct_checkpoint"]


class DirectCheckpoint:
    """One verified direct checkpoint: its manifest, trainer state and data state (read and
    checked; the DCP shards are read later, in place).

    Attributes:
        store: the root; iteration; location (``s3://.../iter_N``); manifest (the document);
        trainer; data (``None`` when the save tracked no data source).

    It crosses ranks (rank 0 verifies, every rank loads): a pickled copy carries no store
    (``store`` is ``None`` in it; every rank reads the shards through its own root).
    """

    def __init__(
        self,
        store: Store | None,
        iteration: int,
        location: str,
        manifest: DirectManifest,
        trainer: TrainerState,
        data: DataState | None,
    ) -> None:
        self.store = store
        self.iteration = iteration
        self.location = location
        self.manifest = manifest
        self.trainer = trainer
        self.data = data

    @property
    def has_data(self) -> bool:
        """The checkpoint holds the data source's state (``data.pt``)."""
        return "data.pt" in self.manifest.control

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "store": None}

    def component(self, name: str) -> str | None:
        """The DCP directory of component ``name`` (store path), ``None`` when not saved."""
        folder = self.manifest.components.get(name)
        return None if folder is None else f"{iter_dirname(self.iteration)}/{folder}"


def _load_torch(data: bytes, where: str) -> Any:
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise CheckpointCorruptError(
            where, f"is not a loadable torch.save archive ({type(exc).__name__}: {exc})"
        ) from None


def read_direct_checkpoint(
    store: Store, iteration: int, *, location: str, explicit: bool = False
) -> DirectCheckpoint:
    """Read and check iteration ``iteration`` of the root ``store`` (reads only).

    Raises:
        ResumeError: ``explicit`` and the iteration holds no manifest (the path is not a
            committed direct checkpoint).
        CheckpointCorruptError: no manifest (latest names it), a malformed one, a named
            object missing or of another size, a control file of another digest, a missing
            control generation.
    """
    iter_dir = iter_dirname(iteration)
    where = f"{location}/{MANIFEST_NAME}"
    if store.stat(f"{iter_dir}/{MANIFEST_NAME}") is None:
        if explicit:
            raise ResumeError(
                f"{location}: holds no {MANIFEST_NAME}, so it is not a committed direct "
                "checkpoint (absent, or a save that crashed before its commit); nothing was "
                "loaded. Point resume= at an iter_N that holds a manifest (statecraft inspect "
                "the root), or use resume=auto",
                path=location,
            )
        raise CheckpointCorruptError(
            where, "is absent although latest names this iteration",
            "Inspect the root; resume explicitly from an older committed iter_N.",
        )  # fmt: skip
    manifest = decode_direct_manifest(
        store.read_bytes(f"{iter_dir}/{MANIFEST_NAME}"), source=where, iteration=iteration
    )
    for component in manifest.components.values():
        if manifest.files and f"{component}/.metadata" not in manifest.files:
            raise CheckpointCorruptError(where, f"names no {component}/.metadata")
    for path, entry in manifest.files.items():
        stat = store.stat(f"{iter_dir}/{path}")
        if stat is None or stat.is_dir or stat.size != entry.size:
            found = "absent" if stat is None else f"{stat.size} bytes"
            raise CheckpointCorruptError(
                f"{location}/{path}",
                f"is {found}; the manifest names {entry.size} bytes",
                "The checkpoint is damaged: resume explicitly from an older iter_N.",
            )
    payloads: dict[str, bytes] = {}
    for name, entry in manifest.control.items():
        path = manifest.control_path(name)
        shown = f"{location}/{path[len(iter_dir) + 1 :]}"
        if store.stat(path) is None:
            raise CheckpointCorruptError(
                shown,
                f"is absent: the manifest names control generation "
                f"{manifest.control_generation}, which does not hold it",
                "The checkpoint is damaged: resume explicitly from an older iter_N.",
            )
        data = store.read_bytes(path)
        if len(data) != entry.size or Digest.of(data, entry.digest.algorithm) != entry.digest:
            raise CheckpointCorruptError(
                shown,
                f"holds {len(data)} bytes that do not match the manifest's {entry.size} bytes "
                f"/ {entry.digest}",
                "The checkpoint is damaged: resume explicitly from an older iter_N.",
            )
        payloads[name] = data
    if "trainer.pt" not in payloads:
        raise CheckpointCorruptError(where, "names no trainer.pt")
    source = f"{location}/trainer.pt"
    trainer = TrainerState.from_payload(_load_torch(payloads["trainer.pt"], source), source=source)
    data_state = None
    if "data.pt" in payloads:
        shown = f"{location}/data.pt"
        data_state = DataState.from_payload(_load_torch(payloads["data.pt"], shown), source=shown)
    return DirectCheckpoint(store, iteration, location, manifest, trainer, data_state)


def _dcp_load(store: Store, path: str, target: dict[str, Any]) -> None:
    try:
        dcp.load(target, storage_reader=StoreStorageReader(store, path))
    except BaseException as exc:  # DCP wraps every rank's error in its own
        raise unwrap_checkpoint_exception(exc) from None


def read_dcp_components(
    store: Store, tracked: Any, checkpoint: DirectCheckpoint, data: DataState | None
) -> Components:
    """Every rank: the DCP components of ``checkpoint`` read in place from the root ``store``
    (this rank's own client) into scratch targets shaped by the live objects
    (:mod:`statecraft.checkpoint.state.dcp_state`, the rules of the local DCP resume; DCP's
    load planner reshards at another world size). No live tensor changes here, except the one
    the reference prescribes: a pristine optimizer is reset to never-stepped with the saved
    param-group options applied before any target is shaped.

    Raises:
        ResumeError: a tracked model or optimizer whose component was not saved, or whose
            keys or shapes the checkpoint lacks.
        CheckpointCorruptError: a missing ``.metadata``, a missing, short or bit-flipped shard
            (named with its item).
    """
    from statecraft.checkpoint.state import dcp_state

    where, trainer = checkpoint.location, checkpoint.trainer
    model = optim = None
    model_path = checkpoint.component("model")
    if tracked.model is not None:
        if model_path is None:
            raise ResumeError(f"{where}: the checkpoint saved no model for the tracked model")
        model = dcp_state.model_load_target(tracked.model)
        _dcp_load(store, model_path, model)
    optim_path = checkpoint.component("optim")
    if tracked.optimizer is not None:
        if optim_path is None:
            raise ResumeError(f"{where}: the checkpoint saved no optimizer state")
        groups: tuple[dict[str, Any], ...] = ()
        if trainer.optimizer_pristine:
            groups = _pristine_groups(store, optim_path, where)
        optim = dcp_state.optimizer_load_target(
            tracked.model, tracked.optimizer, pristine=trainer.optimizer_pristine, groups=groups
        )
        if optim is not None:
            _dcp_load(store, optim_path, optim)
    return Components(model, optim, data, dcp=True)
