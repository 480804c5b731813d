"""Where a Lightning checkpoint path lives in statecraft's terms, and how to find the newest
one that verifies.

Every path Lightning hands a ``CheckpointIO`` (``.../epoch=0-step=10.ckpt``, ``.../last.ckpt``,
``.../hpc_ckpt_1.ckpt``) is a **slot**: a directory of generations ``g00000001/``,
``g00000002/`` ..., each a committed unit (:mod:`statecraft.checkpoint.units`) holding one
file, :data:`CHECKPOINT_FILE` (the checkpoint dict, ``torch.save``'d), and the commit manifest
written last. The store is a :class:`~statecraft.storage.local.LocalStore` over the slot's
parent directory, the slot its base name. A symlink made by ``ModelCheckpoint(save_last=
"link")`` is followed for reads and never for deletes.

This module imports no framework: :func:`last_committed_checkpoint` and
:func:`committed_checkpoint_file` work on a checkpoint directory without Lightning installed
(``statecraft.integrations.lightning`` re-exports both).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Sequence

import attrs

from statecraft.checkpoint.units import (
    UnitVerdict,
    generation_units,
    newest_generation,
)
from statecraft.errors import UnitError, UnitNotCommittedError
from statecraft.storage.local import LocalStore

__all__ = [
    "CHECKPOINT_FILE",
    "FRAMEWORK",
    "SlotAddress",
    "automatic_fallback",
    "committed_checkpoint_file",
    "last_committed_checkpoint",
    "newest_slot_generation",
    "slot_address",
]

CHECKPOINT_FILE = "checkpoint.pt"
"""The payload file of every generation: the checkpoint dict Lightning built."""

FRAMEWORK = "lightning"
"""The ``framework`` recorded in every generation's commit manifest."""

log = logging.getLogger("statecraft.lightning")


@attrs.frozen
class SlotAddress:
    """One Lightning checkpoint path as a statecraft slot.

    Attributes:
        path: the path as Lightning gave it (absolute).
        store: a ``LocalStore`` over the slot's parent directory.
        slot: the slot's name in ``store`` (the path's base name).
    """

    path: str
    store: LocalStore
    slot: str


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


def slot_address(path: str | os.PathLike[str], *, follow_link: bool) -> SlotAddress:
    """The slot of Lightning path ``path``.

    Args:
        follow_link: resolve a symlink at ``path`` to its target (reads); deletes pass
            ``False`` so the link itself is addressed.

    Raises:
        UnitError: ``path`` is a URL (``s3://...``): only local directories are supported.
    """
    absolute = _local_path(path, what="checkpoint path")
    target = os.path.realpath(absolute) if follow_link and os.path.islink(absolute) else absolute
    parent, name = posixpath.split(target)
    return SlotAddress(path=absolute, store=LocalStore(parent), slot=name)


def _describe_passed(passed: Sequence[UnitVerdict]) -> str:
    return "; ".join(f"{v.unit}: {v.state} ({v.reason})" for v in passed)


def newest_slot_generation(address: SlotAddress) -> tuple[UnitVerdict, list[UnitVerdict]]:
    """The newest generation of ``address`` that verifies (deep), and the newer ones passed
    over (each logged at WARNING with its reason).

    Raises:
        UnitNotCommittedError: the path is absent, a plain file (a checkpoint written without
            statecraft, e.g. by ``TorchCheckpointIO``), or a directory with no generation that
            verifies; the message names the path and every generation found with its state.
    """
    path = address.path
    if not os.path.lexists(path):
        raise UnitNotCommittedError(
            f"no Lightning checkpoint at {path}: nothing exists there. Pass an existing "
            "checkpoint path, or last_committed_checkpoint(dirpath) to find the newest one.",
            path=path,
            reason="absent",
        )
    if os.path.isfile(path):
        raise UnitNotCommittedError(
            f"{path} is a plain file, not a statecraft checkpoint slot: it was written "
            "without statecraft (Lightning's TorchCheckpointIO writes one file, with no "
            "commit manifest), so it cannot be verified and is not loaded. Load it with "
            "StatecraftCheckpointIO(allow_unverified=True) or TorchCheckpointIO if you trust "
            "it, or resume from a checkpoint statecraft wrote.",
            path=path,
            reason="plain file without a commit manifest",
        )
    if not os.path.isdir(path):
        raise UnitNotCommittedError(
            f"{path} is neither a checkpoint slot directory nor a file (a dangling link or a "
            "special file); nothing was loaded.",
            path=path,
            reason="not a directory",
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
    ``path`` (deep-verified), for APIs that bypass ``CheckpointIO``.

    ``LightningModule.load_from_checkpoint(path)`` and ``torch.load(path)`` open ``path`` as a
    file: given a statecraft slot directory they fail with ``IsADirectoryError``. Pass them
    this function's result instead::

        model = MyModule.load_from_checkpoint(committed_checkpoint_file(ckpt.best_model_path))

    The file is verified when this returns; nothing stops a later process from changing it
    (committed generations are never rewritten by statecraft).

    Raises:
        UnitNotCommittedError: no generation of ``path`` verifies (see
            :func:`newest_slot_generation`).
        UnitError: ``path`` is a URL.
    """
    address = slot_address(path, follow_link=True)
    verdict, _ = newest_slot_generation(address)
    return address.store.abspath(f"{verdict.unit}/{CHECKPOINT_FILE}")


def _slot_candidates(store: LocalStore) -> list[tuple[int, float, str, UnitVerdict]]:
    """Every slot directly under the store root with a generation that verifies shallowly
    (sizes), as ``(step, manifest mtime, slot, verdict)``."""
    out: list[tuple[int, float, str, UnitVerdict]] = []
    for name in sorted(store.list("")):
        full = store.abspath(name)
        if os.path.islink(full) or not os.path.isdir(full):
            continue  # a save_last="link" symlink names a slot listed under its own name
        if not generation_units(store, name):
            continue
        verdict, passed = newest_generation(store, name, deep=False, settle=False)
        if verdict is None or verdict.manifest is None:
            log.warning(
                "passed over %s: no committed generation (%s)",
                store.abspath(name),
                _describe_passed(passed),
            )
            continue
        step = verdict.manifest.step if verdict.manifest.step is not None else -1
        out.append((step, os.stat(store.abspath(verdict.unit)).st_mtime, name, verdict))
    return out


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
    store = LocalStore(root)
    candidates = sorted(_slot_candidates(store), key=lambda c: (c[0], c[1]), reverse=True)
    for step, _, name, _ in candidates:
        verdict, _passed = newest_generation(store, name, deep=True, log=log)
        if verdict is not None:
            chosen = store.abspath(name)
            log.info("newest committed Lightning checkpoint: %s (step %s)", chosen, step)
            return chosen
        log.warning("passed over %s: no generation verifies on a deep check", store.abspath(name))
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
    hpc = _HPC.match(name)
    if hpc is not None:
        number = int(hpc.group(1))
        siblings = sorted(
            (int(m.group(1)), m.group(0))
            for m in (_HPC.match(n) for n in address.store.list(""))
            if m is not None and int(m.group(1)) < number
        )
        for _, sibling in reversed(siblings):
            verdict, _ = newest_generation(address.store, sibling, deep=True, log=log)
            if verdict is not None:
                return address.store.abspath(sibling)
        return None
    if _LAST.match(name) is not None:
        return last_committed_checkpoint(address.store.abspath(""))
    return None
