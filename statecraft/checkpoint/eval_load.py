"""Loading a checkpoint for evaluation or sampling: weights into a model, and the loop state.

::

    args = statecraft.read_loop_state("out")["model_args"]     # rebuild the model first
    model = GPT(**args)
    loaded = statecraft.load_weights(model, "out")             # newest committed checkpoint
    loaded.iteration, loaded.location, loaded.loop_state

``source`` may be

- an **output root** holding exactly one run (``<root>/<project>/<group>/<name>``); several
  runs are an error that lists them (point at one run's directory instead);
- a **job dir** ``<root>/<project>/<group>/<name>``: its newest attempt that holds a committed
  checkpoint (a legacy flat ``<name>/checkpoints/`` counts as the newest);
- an **attempt dir** ``.../<RUN_TS>`` or a **checkpoints/ dir**;
- an **iter_* dir**: exactly that checkpoint (it must verify; there is no fallback).

The newest committed checkpoint that verifies is used; newer ones that do not verify are
passed over with a warning (logger ``statecraft.eval``). Verification is model-only: the
manifest, every recorded file's size, and the digest and a parse of ``model.pt`` and
``trainer.pt`` (``verify="digest"``, the default; ``"size"`` skips the digests); ``optim.pt``
is never read. The model is checked against the checkpoint (names, shapes, dtypes:
:func:`~statecraft.checkpoint.compatibility.check_fit`) before a tensor is copied. Nothing is
written: no attempt is minted, no writer lease taken, no pointer moved; a run that is training
at the same time is not disturbed.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.compatibility import check_fit
from statecraft.checkpoint.layout import (
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    list_attempts,
    parse_iter_dirname,
)
from statecraft.checkpoint.loading import Components
from statecraft.checkpoint.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.verify import VerifiedCheckpoint, list_iterations, verify_checkpoint
from statecraft.errors import CheckpointError, CheckpointSourceError, StatecraftError
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = ["LoadedCheckpoint", "find_runs", "load_weights", "read_loop_state"]

log = logging.getLogger("statecraft.eval")

_MODEL = CHECKPOINT_PLAN.for_tracked("model").name
_VERIFY = ("digest", "size")
_FS = OsFilesystem()
_KINDS = (
    "an output root with one run, a run dir <root>/<project>/<group>/<name>, an attempt dir, "
    "a checkpoints/ dir or an iter_* dir"
)


@attrs.frozen
class LoadedCheckpoint:
    """The checkpoint :func:`load_weights` loaded.

    Attributes:
        location: the ``iter_*`` directory (a filesystem path).
        iteration: its optimizer step.
        loop_state: the loop's own values saved with it (``trainer.pt`` ``extra``; a copy).
    """

    location: str
    iteration: int
    loop_state: dict[str, Any]


def _is_dir(path: Path, fs: Filesystem = _FS) -> bool:
    stat = fs.stat(str(path))
    return stat is not None and stat.is_dir


def _is_checkpoints_dir(path: Path) -> bool:
    if path.name == CHECKPOINTS_DIR or _FS.stat(str(path / LATEST_POINTER)) is not None:
        return True
    return any(
        parse_iter_dirname(n) is not None and _is_dir(path / n) for n in _FS.listdir(str(path))
    )


def _is_job_dir(path: Path, fs: Filesystem = _FS) -> bool:
    """A job dir holds an attempt or a legacy flat ``checkpoints/`` dir."""
    return _is_dir(path / CHECKPOINTS_DIR, fs) or bool(list_attempts(path, filesystem=fs))


def find_runs(
    output_root: str | os.PathLike[str], *, filesystem: Filesystem | None = None
) -> list[Path]:
    """The job dirs ``<output_root>/<project>/<group>/<name>`` that hold an attempt or a legacy
    ``checkpoints/`` dir, sorted; read through ``filesystem`` (default: the OS)."""
    fs = filesystem or _FS

    def subdirs(path: Path) -> list[Path]:
        if not _is_dir(path, fs):
            return []
        return [path / n for n in sorted(fs.listdir(str(path))) if _is_dir(path / n, fs)]

    return [
        job
        for project in subdirs(Path(output_root))
        for group in subdirs(project)
        for job in subdirs(group)
        if _is_job_dir(job, fs)
    ]


def _checkpoint_dirs(source: Path, given: str) -> tuple[list[Path], int | None]:
    """The checkpoints dirs to try, newest attempt first, and the iteration an ``iter_*``
    source pins (``None``: the newest that verifies)."""
    iteration = parse_iter_dirname(source.name)
    if iteration is not None:
        return [source.parent], iteration
    if _is_checkpoints_dir(source):
        return [source], None
    if source.name in list_attempts(source.parent, filesystem=_FS):  # an attempt dir
        return ([source / CHECKPOINTS_DIR] if _is_dir(source / CHECKPOINTS_DIR) else []), None
    if not _is_job_dir(source):
        runs = find_runs(source)
        if len(runs) != 1:
            listed = ", ".join(str(r.relative_to(source)) for r in runs)
            raise CheckpointSourceError(
                f"{given}: holds {'no run' if not runs else f'{len(runs)} runs ({listed})'}; "
                f"point at one of: {_KINDS}" + (", e.g. " + str(runs[0]) if runs else ""),
                source=given,
                runs=[str(r) for r in runs],
            )
        source = runs[0]
    dirs = [source / CHECKPOINTS_DIR] if _is_dir(source / CHECKPOINTS_DIR) else []
    attempts = reversed(list_attempts(source, filesystem=_FS))
    dirs += [
        source / ts / CHECKPOINTS_DIR for ts in attempts if _is_dir(source / ts / CHECKPOINTS_DIR)
    ]
    return dirs, None


def _choose(source: str | os.PathLike[str], verify: str) -> VerifiedCheckpoint:
    """The newest committed checkpoint under ``source`` whose model and trainer state
    verify (see the module docstring)."""
    if verify not in _VERIFY:
        raise CheckpointError(f"verify must be one of {list(_VERIFY)}, got {verify!r}")
    given = str(source)
    path = Path(source).expanduser().absolute()
    if not _is_dir(path):
        raise CheckpointSourceError(
            f"{given}: no such directory; point at {_KINDS}", source=given, runs=[]
        )
    dirs, pinned = _checkpoint_dirs(path, given)
    passed_over: list[str] = []
    for directory in dirs:
        store = LocalStore(str(directory.resolve()), fs=_FS)
        iterations = [pinned] if pinned is not None else list_iterations(store)
        for iteration in iterations:
            try:
                return verify_checkpoint(store, iteration, level=verify, only=(_MODEL,))
            except (StatecraftError, OSError) as exc:  # does not verify: pass over, with why
                if pinned is not None:
                    raise
                reason = str(exc)
                passed_over.append(reason)
                log.warning("passed over %s/iter_%09d: %s", directory, iteration, reason)
    raise CheckpointSourceError(
        f"{given}: no committed checkpoint that verifies (verify={verify}; "
        f"{len(passed_over)} passed over"
        + (f", the newest because {passed_over[0]}" if passed_over else "")
        + "); run statecraft inspect on it to see every checkpoint's state",
        source=given,
        passed_over=passed_over,
    )


def _path(chosen: VerifiedCheckpoint) -> str:
    return chosen.location.removeprefix("local:")


def load_weights(
    model: Any, source: str | os.PathLike[str], *, verify: str = "digest"
) -> LoadedCheckpoint:
    """Load the weights of the newest committed checkpoint under ``source`` (or the given
    ``iter_*`` one) into ``model``; see the module docstring for ``source``.

    Args:
        model: an ``nn.Module`` built with the saving run's shapes and dtypes.
        verify: ``"digest"`` (model.pt's and trainer.pt's content digests) or ``"size"``.

    Returns:
        which checkpoint was loaded, and the loop state saved with it.

    Raises:
        CheckpointSourceError: ``source`` does not exist, holds no run or several, or no
            checkpoint under it verifies.
        CheckpointCorruptError / TrainerStateError: an ``iter_*`` source does not verify.
        ResumeError: the model does not fit the checkpoint (names, shapes, dtypes; the model
            is unchanged).
    """
    chosen = _choose(source, verify)
    state = chosen.payloads.pop(_MODEL)
    location = _path(chosen)
    check_fit(_Model(model), chosen.trainer, Components(state, None, None), location=location)
    model.load_state_dict(state)
    log.info("loaded the weights of %s (iter %d)", location, chosen.iteration)
    return LoadedCheckpoint(location, chosen.iteration, _loop_state(chosen))


def read_loop_state(source: str | os.PathLike[str], *, verify: str = "digest") -> dict[str, Any]:
    """The loop state (``Checkpointer.loop_state`` when it saved) of the checkpoint
    :func:`load_weights` would load from ``source``, e.g. ``model_args`` to build the model.

    Raises:
        CheckpointSourceError / CheckpointCorruptError / TrainerStateError: as
            :func:`load_weights`.
    """
    return _loop_state(_choose(source, verify))


def _loop_state(chosen: VerifiedCheckpoint) -> dict[str, Any]:
    trainer = chosen.trainer
    return copy.deepcopy(dict(trainer.extra)) if trainer is not None else {}


@attrs.frozen
class _Model:
    """What the compatibility check needs of the tracked objects: a model, no optimizer."""

    model: Any
    optimizer: Any = None
