"""Where a Lightning checkpoint path lives in statecraft's terms, and how to find the newest
one that verifies.

Every path Lightning hands a ``CheckpointIO`` (``ckpts/epoch=0-step=10.ckpt``,
``ckpts/last.ckpt``, ``ckpts/hpc_ckpt_1.ckpt``) has a **slot** ``ckpts/.statecraft/<name>/``:
a directory of generations ``g00000001/``, ``g00000002/`` ..., each a committed unit
(:mod:`statecraft.checkpoint.units`) holding one file, :data:`CHECKPOINT_FILE` (the
checkpoint dict, ``torch.save``'d), and the commit manifest written last. The familiar path
itself is a relative symlink to the ``checkpoint.pt`` of the slot's newest committed
generation, **published** only after that generation committed
(:mod:`statecraft.integrations.lightning_links`), so ``torch.load(path)`` and
``load_from_checkpoint(path)`` work unchanged and never see an uncommitted file.

A slot directory at the familiar path itself (the layout of statecraft before the link) is
still read, written over (migrated) and removed: :attr:`SlotAddress.legacy`. A symlink made
by ``ModelCheckpoint(save_last="link")`` is followed for reads and never for deletes.

The slots of a directory are listed by the public catalog's one listing of this layout
(:func:`statecraft.checkpoint.catalog_api.unit_layouts.lightning_slots`, what
``statecraft.checkpoints(dirpath)`` reads); this module adds the deep verification and the
durability (settle) a resume needs.

This module imports no framework: :func:`last_committed_checkpoint` and
:func:`committed_checkpoint_file` work on a checkpoint directory without Lightning installed
(``statecraft.integrations.lightning`` re-exports both).
"""

from __future__ import annotations

import logging
import math
import os
import posixpath
import re
from collections.abc import Sequence
from typing import Any

import attrs

from statecraft.checkpoint.catalog_api.unit_layouts import (
    LIGHTNING_FILE,
    LIGHTNING_FRAMEWORK,
    LIGHTNING_SLOTS_DIR,
    MONITOR_META,
    MONITOR_SCORE_META,
    Slot,
    lightning_slots,
)
from statecraft.checkpoint.units import UnitVerdict, newest_generation
from statecraft.errors import UnitError, UnitNotCommittedError
from statecraft.storage.local import LocalStore

__all__ = [
    "CHECKPOINT_FILE",
    "FRAMEWORK",
    "SLOTS_DIR",
    "SlotAddress",
    "automatic_fallback",
    "committed_checkpoint_file",
    "last_committed_checkpoint",
    "monitor_meta",
    "newest_slot_generation",
    "published_unit",
    "slot_address",
]

CHECKPOINT_FILE = LIGHTNING_FILE
"""The payload file of every generation: the checkpoint dict Lightning built."""

FRAMEWORK = LIGHTNING_FRAMEWORK
"""The ``framework`` recorded in every generation's commit manifest."""

SLOTS_DIR = LIGHTNING_SLOTS_DIR
"""The hidden directory beside the checkpoints that holds their slots."""

log = logging.getLogger("statecraft.lightning")

_LINK_TARGET = re.compile(
    rf"^{re.escape(SLOTS_DIR)}/(?P<slot>[^/]+)/(?P<generation>g\d{{8}})/{re.escape(CHECKPOINT_FILE)}$"
)


@attrs.frozen
class SlotAddress:
    """One Lightning checkpoint path as a statecraft slot.

    Attributes:
        path: the path as Lightning gave it (absolute).
        familiar: the path whose name the slot carries (``path`` itself, or for a
            ``save_last="link"`` link followed on a read, the checkpoint it names).
        root: the directory holding the slot (``<dir>/.statecraft``; for a legacy slot,
            ``<dir>``).
        slot: the slot's name in :attr:`store` (the familiar path's base name).
        legacy: the slot is a directory at the familiar path itself (statecraft's layout
            before the published link).
    """

    path: str
    familiar: str
    root: str
    slot: str
    legacy: bool = False

    @property
    def store(self) -> LocalStore:
        """A ``LocalStore`` over :attr:`root` (creating it: ask only to write, or once
        :meth:`exists` said so)."""
        return LocalStore(self.root)

    def exists(self) -> bool:
        """The slot directory exists (reads only)."""
        return os.path.isdir(posixpath.join(self.root, self.slot))

    @property
    def slot_path(self) -> str:
        return posixpath.join(self.root, self.slot)


def _local_path(path: str | os.PathLike[str], *, what: str) -> str:
    text = os.fspath(path)
    if "://" in text and not text.startswith("file://"):
        raise UnitError(
            f"{what} {text!r} is a URL: the statecraft Lightning plugin writes local (or "
            "network-mounted) directories only. Give ModelCheckpoint a local dirpath, or use "
            "Lightning's TorchCheckpointIO for object stores (without the commit guarantee).",
            path=text,
            reason="url",
        )
    if text.startswith("file://"):
        text = text[len("file://") :]
    return posixpath.normpath(os.path.abspath(text))


def published_unit(familiar: str) -> str | None:
    """The generation (``<slot>/g0000000N``) the symlink at ``familiar`` publishes, when it
    is a link statecraft made (``.statecraft/<name>/g<8 digits>/checkpoint.pt`` with
    ``<name>`` its own name); ``None`` for anything else. Reads only."""
    if not os.path.islink(familiar):
        return None
    match = _LINK_TARGET.match(os.readlink(familiar))
    if match is None or match.group("slot") != posixpath.basename(familiar):
        return None
    return f"{match.group('slot')}/{match.group('generation')}"


def _resolve(absolute: str) -> str:
    """Follow foreign symlinks (``save_last="link"``) to the checkpoint path they name; stop
    at a link statecraft published (its name is the checkpoint's)."""
    current = absolute
    for _ in range(40):  # the kernel's own limit on nested links
        if not os.path.islink(current) or published_unit(current) is not None:
            return current
        current = posixpath.normpath(
            posixpath.join(posixpath.dirname(current), os.readlink(current))
        )
    return current


def slot_address(path: str | os.PathLike[str], *, follow_link: bool) -> SlotAddress:
    """The slot of Lightning path ``path``.

    Args:
        follow_link: resolve a ``save_last="link"`` symlink at ``path`` to the checkpoint
            it names (reads); deletes pass ``False`` so the link itself is addressed. A link
            statecraft published is never followed: its name is the checkpoint's.

    Raises:
        UnitError: ``path`` is a URL (``s3://...``): only local directories are supported.
    """
    absolute = _local_path(path, what="checkpoint path")
    familiar = _resolve(absolute) if follow_link else absolute
    parent, name = posixpath.split(familiar)
    if os.path.isdir(familiar) and not os.path.islink(familiar):
        return SlotAddress(path=absolute, familiar=familiar, root=parent, slot=name, legacy=True)
    return SlotAddress(
        path=absolute, familiar=familiar, root=posixpath.join(parent, SLOTS_DIR), slot=name
    )


def monitor_meta(checkpoint: Any, path: str) -> dict[str, str | float]:
    """The ``ModelCheckpoint`` monitor and score of the checkpoint dict ``checkpoint`` being
    saved at ``path`` (absolute, normalized), as commit-manifest ``meta``
    (``{"monitor": "val_loss", "monitor_score": 0.41}``): from the callback state
    (``checkpoint["callbacks"]``) whose ``best_k_models`` holds this path (Lightning records
    the score there before it saves a top-k checkpoint; a ``last.ckpt`` is in none). ``{}``
    without one, or for a non-finite score. ``statecraft.checkpoints(dirpath)`` lists it."""
    callbacks = checkpoint.get("callbacks") if isinstance(checkpoint, dict) else None
    for state in callbacks.values() if isinstance(callbacks, dict) else ():
        monitor = state.get("monitor") if isinstance(state, dict) else None
        best_k = state.get("best_k_models") if isinstance(state, dict) else None
        if not isinstance(monitor, str) or not monitor or not isinstance(best_k, dict):
            continue
        for saved, score in best_k.items():
            if not isinstance(saved, str) or "://" in saved:
                continue
            if posixpath.normpath(os.path.abspath(saved)) != path:
                continue
            try:
                value = float(score)  # a 0-d tensor or a number
            except (TypeError, ValueError, RuntimeError):
                return {}
            return (
                {MONITOR_META: monitor, MONITOR_SCORE_META: value} if math.isfinite(value) else {}
            )
    return {}


def _describe_passed(passed: Sequence[UnitVerdict]) -> str:
    return "; ".join(f"{v.unit}: {v.state} ({v.reason})" for v in passed)


def newest_slot_generation(address: SlotAddress) -> tuple[UnitVerdict, list[UnitVerdict]]:
    """The newest generation of ``address`` that verifies (deep), and the newer ones passed
    over (each logged at WARNING with its reason).

    Raises:
        UnitNotCommittedError: the path is absent, a plain file (a checkpoint written without
            statecraft, e.g. by ``TorchCheckpointIO``), or has no generation that verifies;
            the message names the path and every generation found with its state.
    """
    path = address.path
    familiar = address.familiar
    if os.path.isfile(familiar) and not os.path.islink(familiar):
        raise UnitNotCommittedError(
            f"{path} is a plain file, not a statecraft checkpoint: it was written "
            "without statecraft (Lightning's TorchCheckpointIO writes one file, with no "
            "commit manifest), so it cannot be verified and is not loaded. Load it with "
            "StatecraftCheckpointIO(allow_unverified=True) or TorchCheckpointIO if you trust "
            "it, or resume from a checkpoint statecraft wrote.",
            path=path,
            reason="plain file without a commit manifest",
        )
    if not address.exists():
        if os.path.lexists(familiar) and published_unit(familiar) is None:
            raise UnitNotCommittedError(
                f"{path} is neither a statecraft checkpoint nor a file (a dangling link or "
                "a special file); nothing was loaded.",
                path=path,
                reason="not a checkpoint",
            )
        raise UnitNotCommittedError(
            f"no Lightning checkpoint at {path}: nothing exists there (no slot "
            f"{address.slot_path}). Pass an existing checkpoint path, or "
            "last_committed_checkpoint(dirpath) to find the newest one.",
            path=path,
            reason="absent",
        )
    verdict, passed = newest_generation(address.store, address.slot, deep=True, log=log)
    if verdict is None:
        found = _describe_passed(passed) if passed else "no generation directories"
        raise UnitNotCommittedError(
            f"no committed checkpoint in {path}: found {found}. Nothing was loaded; resume "
            "from an older checkpoint (last_committed_checkpoint(dirpath) finds the newest "
            "that verifies).",
            path=path,
            reason=found,
        )
    return verdict, passed


def committed_checkpoint_file(path: str | os.PathLike[str]) -> str:
    """The ``checkpoint.pt`` of the newest committed generation of Lightning checkpoint
    ``path``, deep-verified now.

    ``torch.load(path)`` and ``LightningModule.load_from_checkpoint(path)`` work on ``path``
    itself (a link to the same committed file); this function adds the deep verification,
    and finds the file of a legacy slot directory (which those calls cannot open)::

        model = MyModule.load_from_checkpoint(committed_checkpoint_file(ckpt.best_model_path))

    Raises:
        UnitNotCommittedError: no generation of ``path`` verifies (see
            :func:`newest_slot_generation`).
        UnitError: ``path`` is a URL.
    """
    address = slot_address(path, follow_link=True)
    verdict, _ = newest_slot_generation(address)
    return address.store.abspath(f"{verdict.unit}/{CHECKPOINT_FILE}")


def _committed_slots(directory: str) -> list[Slot]:
    """The slots of the checkpoints in ``directory`` whose newest generation verifies
    shallowly (sizes), newest first (the catalog's listing); each slot without one is logged
    at WARNING. Reads only."""
    committed = []
    for slot in lightning_slots(directory):
        if slot.verdict is None:
            where = posixpath.join(slot.root, slot.name)
            log.warning("passed over %s: no committed generation (%s)", where,
                        _describe_passed(slot.passed))  # fmt: skip
            continue
        committed.append(slot)
    return committed


def _address(slot: Slot) -> SlotAddress:
    return SlotAddress(slot.familiar, slot.familiar, slot.root, slot.name, slot.legacy)


def last_committed_checkpoint(dirpath: str | os.PathLike[str]) -> str | None:
    """The newest checkpoint under ``dirpath`` (a ``ModelCheckpoint.dirpath``) that verifies,
    as a path to pass as ``trainer.fit(ckpt_path=...)``; ``None`` when there is none.

    Newest means the highest ``global_step`` recorded in the committed generation's manifest,
    then the newest generation directory (mtime): a ``last.ckpt`` and a top-k checkpoint of the
    same step hold the same state. Every slot whose newest generation does not verify is passed
    over (or its older generation taken) with a WARNING on ``statecraft.lightning`` naming it
    and why; symlinks (``save_last="link"``) are skipped since their targets are listed.

    Raises:
        UnitError: ``dirpath`` is a URL.
    """
    root = _local_path(dirpath, what="checkpoint directory")
    if not os.path.isdir(root):
        return None
    for slot in _committed_slots(root):
        address = _address(slot)
        verdict, _passed = newest_generation(address.store, address.slot, deep=True, log=log)
        if verdict is not None:
            log.info("newest committed Lightning checkpoint: %s (step %s)", slot.familiar,
                     slot.step if slot.step >= 0 else None)  # fmt: skip
            return slot.familiar
        log.warning("passed over %s: no generation verifies on a deep check", slot.familiar)
    return None


_HPC = re.compile(r"^hpc_ckpt_(\d+)\.ckpt$")
_LAST = re.compile(r"^last(-v\d+)?\.ckpt$")


def automatic_fallback(address: SlotAddress) -> str | None:
    """For a path Lightning chose by itself, the newest sibling that verifies, when the path
    holds no committed checkpoint; ``None`` when the path is not an automatic one or no
    sibling verifies.

    Lightning picks two paths without the user naming them: ``hpc_ckpt_<N>.ckpt`` (a SLURM
    requeue resumes from the highest N, the one a killed SIGUSR1 save may have left without a
    commit) and ``last*.ckpt`` (``ckpt_path="last"``, by mtime). For those, as for "last"
    resolution, the newest committed checkpoint is what was meant: ``hpc_ckpt_<M>.ckpt`` with
    the highest M < N that verifies, or for ``last`` the newest committed checkpoint of the
    directory (:func:`last_committed_checkpoint`). A path the user named
    (``epoch=3-step=40.ckpt``) never falls back: loading another checkpoint than the one named
    would be a silent change of trajectory. Reads and verifies only.
    """
    name = address.slot
    directory = posixpath.dirname(address.familiar)
    hpc = _HPC.match(name)
    if hpc is not None:
        number = int(hpc.group(1))
        siblings = []
        for slot in _committed_slots(directory):
            match = _HPC.match(slot.name)
            if match is not None and int(match.group(1)) < number:
                siblings.append((int(match.group(1)), slot))
        for _, slot in sorted(siblings, key=lambda c: c[0], reverse=True):
            sibling = _address(slot)
            verdict, _ = newest_generation(sibling.store, sibling.slot, deep=True, log=log)
            if verdict is not None:
                return slot.familiar
        return None
    if _LAST.match(name) is not None:
        return last_committed_checkpoint(directory)
    return None
