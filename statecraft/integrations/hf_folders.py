"""The ``checkpoint-N`` folders of a Hugging Face ``Trainer``'s ``output_dir``: finding them (by
N, never by mtime), the newest one that verifies (:func:`last_committed_checkpoint`), and
checking one explicit folder (:func:`verified_checkpoint`). Reads only, except the fsync of a
folder returned. The folders are found by the public catalog's one listing of this layout
(:func:`statecraft.checkpoint.catalog_api.unit_layouts.hf_folders`, what
``statecraft.checkpoints(output_dir)`` reads).

:mod:`statecraft.integrations.hf` re-exports the public names beside the callback that seals
the folders; like it, this module needs the ``statecraft[hf]`` extra (transformers).
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from statecraft.checkpoint.catalog_api.unit_layouts import HF_PREFIX, hf_folders
from statecraft.checkpoint.units import UnitVerdict, newest_committed, verify_unit
from statecraft.errors import UnitDamagedError, UnitNotCommittedError
from statecraft.logs import LOGGER_NAME
from statecraft.storage.local import LocalStore

__all__ = [
    "LOG",
    "checkpoint_folders",
    "folder_store",
    "last_committed_checkpoint",
    "raise_not_committed",
    "verified_checkpoint",
]

LOG = logging.getLogger(f"{LOGGER_NAME}.hf")
if PREFIX_CHECKPOINT_DIR != HF_PREFIX:  # pragma: no cover - a transformers that renamed them
    raise ImportError(
        f"statecraft.integrations.hf expects the Trainer's folders named {HF_PREFIX}-N, this "
        f"transformers writes {PREFIX_CHECKPOINT_DIR}-N: upgrade statecraft or pin transformers"
    )


def checkpoint_folders(output_dir: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """The ``checkpoint-N`` directories directly under ``output_dir`` as ``(N, name)``, newest
    (largest N) first; ``[]`` when ``output_dir`` does not exist (it is not created). Ordering
    is by N, never by mtime (the Trainer's rotation sorts by mtime)."""
    output_dir = os.fspath(output_dir)
    if not os.path.isdir(output_dir):
        return []
    return hf_folders(folder_store(output_dir))


def folder_store(output_dir: str) -> LocalStore:
    """The store rooted at the Trainer's ``output_dir`` (made absolute)."""
    return LocalStore(os.path.abspath(output_dir))


def last_committed_checkpoint(
    output_dir: str | os.PathLike[str], *, deep: bool = True, log: logging.Logger | None = None
) -> str | None:
    """The newest ``output_dir/checkpoint-N`` (by N) that verifies, to pass as
    ``trainer.train(resume_from_checkpoint=...)``; ``None`` when there is none (a fresh start:
    ``resume_from_checkpoint=None`` trains from scratch).

    Every newer folder passed over is logged at WARNING with its reason (no commit manifest: a
    save that was killed; a file whose size or digest differs: damage). No name or byte is
    changed on disk; the folder returned is fsynced (a commit a killed process left in the
    page cache is made durable before the Trainer relies on it).

    Args:
        output_dir: the Trainer's ``args.output_dir``.
        deep: digest every file (default); ``False`` checks sizes only.
        log: where the passed-over folders are reported (default ``statecraft.hf``).
    """
    output_dir = os.fspath(output_dir)
    if not os.path.isdir(output_dir):
        return None
    store = folder_store(output_dir)
    folders = hf_folders(store)
    if not folders:
        return None
    logger = log if log is not None else LOG
    verdict, passed = newest_committed(store, [name for _, name in folders], deep=deep, log=logger)
    if verdict is None:
        logger.warning(
            "no committed checkpoint in %s (%d folder(s) passed over); starting from scratch",
            output_dir,
            len(passed),
        )
        return None
    return os.path.join(output_dir, verdict.unit)


def verified_checkpoint(path: str | os.PathLike[str], *, deep: bool = True) -> str:
    """``path`` itself when it is a committed ``checkpoint-N`` folder that verifies, to pass as
    ``resume_from_checkpoint`` when the user names one explicitly.

    Raises:
        UnitNotCommittedError: the folder is absent or has no commit manifest (a save that did
            not finish); nothing was read.
        UnitDamagedError: the manifest does not decode, or a file it names is missing or
            differs in size or digest.
    """
    path = os.path.abspath(os.fspath(path))
    verdict = verify_unit(folder_store(os.path.dirname(path)), os.path.basename(path), deep=deep)
    if not verdict.committed:
        raise_not_committed(path, verdict)
    return path


def raise_not_committed(path: str, verdict: UnitVerdict) -> NoReturn:
    """Refuse the folder ``path`` whose ``verdict`` is not committed.

    Raises:
        UnitDamagedError: the verdict is ``damaged``.
        UnitNotCommittedError: any other state (absent, no commit manifest).
    """
    fix = (
        "resume from the newest committed checkpoint instead: "
        "resume_from_checkpoint=last_committed_checkpoint(output_dir)"
    )
    if verdict.state == "damaged":
        raise UnitDamagedError(
            f"{path} is damaged ({verdict.reason}); it is never loaded. {fix}",
            path=path,
            reason=verdict.reason,
        )
    raise UnitNotCommittedError(
        f"{path} is not a committed checkpoint ({verdict.state}: {verdict.reason}); "
        f"it may be a save that was killed part way. {fix}",
        path=path,
        reason=verdict.reason,
    )
