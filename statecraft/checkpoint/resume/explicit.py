"""An explicit resume source (``resume=<path>``): resolving the path and proving it, for the
``verify_explicit`` effect of :mod:`statecraft.checkpoint.resume.bindings`.

The path is an ``iter_<9 digits>`` checkpoint directory (verified like any checkpoint; its
iteration is the directory's segment and its validation stage is read from its records) or a
legacy ``.pt`` file (no manifest, so not verified; its iteration is its trainer state's
``optimizer_step``). A path that is itself a partial artifact is refused before anything is
read (:func:`~statecraft.checkpoint.resume.rules.artifact_source_refusal`). Any
problem fails the resume: an explicit source never falls back and never trains from scratch.
"""

from __future__ import annotations

import logging
from pathlib import Path

from statecraft.checkpoint.kernel.artifact_catalog import ArtifactEntry
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname, parse_iter_dirname
from statecraft.checkpoint.kernel.retention_marks import (
    MarkKind,
    invalidated_refusal,
    newest_resumable,
    read_mark,
    weights_only_refusal,
)
from statecraft.checkpoint.kernel.validation_records import (
    StageReading,
    ValidationStage,
    read_stage,
)
from statecraft.checkpoint.kernel.verify import VerifiedCheckpoint, verify_checkpoint
from statecraft.checkpoint.resume.rules import (
    artifact_refusal,
    artifact_source_refusal,
)
from statecraft.checkpoint.state import TrainerState
from statecraft.errors import CheckpointCorruptError, ResumeError
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem
from statecraft.storage.local import LocalStore
from statecraft.writers.base import Writer

__all__ = ["resolve_explicit", "verify_explicit_source"]

log = logging.getLogger("statecraft.resume")


def resolve_explicit(path_text: str, fs: Filesystem) -> tuple[Store, int | None, str]:
    """The store, iteration (``None`` for a legacy ``.pt``) and name of an explicit path,
    resolved through ``fs``.

    Raises:
        ResumeError: the path does not exist, or is a directory not named ``iter_*``, or a
            file that is not a ``.pt``.
    """
    path = Path(path_text).expanduser().absolute()
    stat = fs.stat(str(path))
    if stat is not None and stat.is_dir:
        iteration = parse_iter_dirname(path.name)
        if iteration is None:
            raise ResumeError(
                f"resume={path_text}: a directory must be an iter_<9 digits> checkpoint directory"
                f" (got {path.name!r}); point resume at one, or use resume=auto"
            )
        return LocalStore(str(path.parent.resolve()), fs=fs), iteration, path.name
    if stat is not None and path.suffix == ".pt":
        return LocalStore(str(path.parent.resolve()), fs=fs), None, path.name
    raise ResumeError(
        f"resume={path_text}: no such checkpoint (expected an existing iter_<9 digits> directory "
        "or a legacy .pt file). Refusing to train from scratch; fix the path or use resume=auto"
    )


def verify_explicit_source(
    path_text: str,
    *,
    fs: Filesystem,
    writer: Writer,
    level: str,
    newest_artifact: ArtifactEntry | None,
) -> tuple[VerifiedCheckpoint, StageReading]:
    """Prove the explicit source ``path_text`` and read its validation stage.

    Args:
        newest_artifact: the attempt's newest artifact with a manifest; a legacy file with no
            derivable iteration is refused naming it (with none, the old refusal stands).

    Raises:
        ArtifactResumeError: the path is an artifact, or a legacy file without trainer state
            while the attempt holds an artifact.
        ResumeError: the path does not resolve, or a legacy file has no trainer state.
        WeightsOnlyResumeError: retention removed the checkpoint's optimizer state.
        CheckpointCorruptError / TrainerStateError: the checkpoint does not verify, or
            retention invalidated it (is deleting it).
    """
    refusal = artifact_source_refusal(path_text, fs, newest_artifact)
    if refusal is not None:
        raise refusal
    store, iteration, name = resolve_explicit(path_text, fs)
    if iteration is not None:
        mark = read_mark(store, iteration)
        if mark is not None:
            refuse = (
                invalidated_refusal if mark.kind is MarkKind.INVALIDATED else weights_only_refusal
            )
            raise refuse(store, mark, source=path_text, newest=newest_resumable(store))
        verified = _verify_named(store, iteration, path_text, level=level, writer=writer)
        saved = verified.trainer.validation if verified.trainer is not None else None
        return verified, read_stage(store, iteration, saved)
    where = f"{store.describe()}/{name}"
    payload = writer.read(store, name, mmap=False)
    if not isinstance(payload, dict) or "model" not in payload:
        raise CheckpointCorruptError(
            where,
            "is not a legacy checkpoint (expected a dict with a 'model' state dict)",
            "Point resume at an iter_* directory instead.",
        )
    if "trainer" not in payload:
        behind = artifact_refusal(
            newest_artifact, source=f"resume={path_text}", checkpoint=where, iteration=None
        )
        if behind is not None:
            raise behind
        raise ResumeError(
            f"resume={path_text}: the legacy file has no trainer state, so its iteration "
            "cannot be derived; use it as model initialisation instead of exact resume"
        )
    trainer = TrainerState.from_payload(payload["trainer"], source=where)
    log.warning(
        "resume=%s is a legacy .pt without a manifest: integrity is not verified", path_text
    )
    verified = VerifiedCheckpoint(store, trainer.optimizer_step, where, trainer, None, payload)
    return verified, StageReading(ValidationStage.NONE)


#: what to do about an explicit source that is not a commit
_EXPLICIT_FIX = (
    "Point resume at a committed iter_* directory (one holding its manifest and every file "
    "it records), or set resume=auto to adopt the newest checkpoint that verifies"
)


def _verify_named(
    store: Store, iteration: int, path_text: str, *, level: str, writer: Writer
) -> VerifiedCheckpoint:
    """:func:`verify_checkpoint` of the iteration ``resume=<path_text>`` names. A directory
    without a manifest is refused here, naming the knob and that the explicit resume failed
    (the verifier's own wording, "never adopted; nothing to do", is ``resume=auto``'s);
    any other problem is the verifier's refusal, word for word.

    Raises:
        CheckpointCorruptError: it has no manifest, or does not verify.
    """
    if store.stat(f"{iter_dirname(iteration)}/{MANIFEST_NAME}") is None:
        raise CheckpointCorruptError(
            f"{store.describe()}/{iter_dirname(iteration)}",
            f"the explicit resume={path_text} failed, nothing was loaded: it has no manifest "
            "(an interrupted save, never a commit)",
            _EXPLICIT_FIX + ".",
        )
    return verify_checkpoint(store, iteration, level=level, writer=writer)
