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
- an **iter_* dir**: exactly that checkpoint (it must verify; there is no fallback);
- an **artifact dir** ``.../checkpoint_artifacts/iter_*`` (or an ``iter_*`` dir holding
  ``.posttrain-checkpoint-artifact.json``): exactly that partial artifact, whose plan must
  include ``model`` (an artifact of ``[optimizer]`` or ``[training_state]`` is refused, saying
  so); verified with :func:`~statecraft.checkpoint.kernel.artifact_verify.verify_artifact`;
- a **checkpoint_artifacts/ dir**: its newest committed artifact with ``model`` that verifies
  (artifacts without ``model`` are skipped, ones that do not verify passed over with a
  warning).

A run, attempt or ``checkpoints/`` source only ever loads full checkpoints: artifacts are
read only when pointed at. The loop state of an artifact is its ``trainer.pt`` ``extra`` when
its plan holds ``training_state``, else ``{}``; ``model.pt`` of an artifact is the same
ordinary ``torch.save`` file as a checkpoint's (plain ``torch.load(weights_only=True)`` reads
it).

The newest committed checkpoint that verifies is used; newer ones that do not verify are
passed over with a warning (logger ``statecraft.eval``). Verification is model-only: the
manifest, every recorded file's size, and the digest and a parse of ``model.pt`` and
``trainer.pt`` (``verify="digest"``, the default; ``"size"`` skips the digests); ``optim.pt``
is never read. A **weights-only** checkpoint (retention removed its ``optim.pt``, see
:mod:`~statecraft.checkpoint.kernel.retention_marks`) loads like any other; an **invalidated** one
(retention is deleting it) is passed over, and refused when named. The model is checked
against the checkpoint (names, shapes, dtypes:
:func:`~statecraft.checkpoint.kernel.compatibility.check_fit`) before a tensor is copied. Nothing is
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

from statecraft.checkpoint.kernel.artifact_verify import verify_artifact
from statecraft.checkpoint.kernel.compatibility import check_fit
from statecraft.checkpoint.kernel.ema_entries import split_ema
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    ARTIFACTS_DIR,
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    iter_dirname,
    list_attempts,
    parse_iter_dirname,
)
from statecraft.checkpoint.kernel.loading import Components
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.kernel.retention_marks import (
    MarkKind,
    invalidated_refusal,
    newest_resumable,
    read_mark,
)
from statecraft.checkpoint.kernel.verify import (
    VerifiedCheckpoint,
    list_iterations,
    verify_checkpoint,
)
from statecraft.errors import CheckpointError, CheckpointSourceError, StatecraftError
from statecraft.storage.filesystem import Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = ["LoadedCheckpoint", "find_runs", "load_weights", "read_loop_state", "read_model_state"]

log = logging.getLogger("statecraft.eval")

_MODEL = CHECKPOINT_PLAN.for_tracked("model").name
_VERIFY = ("digest", "size")
_FS = OsFilesystem()
_KINDS = (
    "an output root with one run, a run dir <root>/<project>/<group>/<name>, an attempt dir, "
    "a checkpoints/ dir, an iter_* dir, or a checkpoint_artifacts/ dir or one artifact in it"
)


@attrs.frozen
class LoadedCheckpoint:
    """The checkpoint :func:`load_weights` loaded.

    Attributes:
        location: the ``iter_*`` directory (a filesystem path).
        iteration: its optimizer step.
        loop_state: the loop's own values saved with it (``trainer.pt`` ``extra``; a copy;
            ``{}`` for an artifact without ``training_state``).
        kind: ``"checkpoint"`` (a full checkpoint) or ``"artifact"`` (a partial artifact).
    """

    location: str
    iteration: int
    loop_state: dict[str, Any]
    kind: str = "checkpoint"


@attrs.frozen
class _Chosen:
    """A verified checkpoint or artifact: what loading needs of either."""

    location: str  # a filesystem path
    iteration: int
    trainer: Any  # TrainerState | None
    payloads: dict[str, Any] = attrs.field(eq=False, repr=False)
    kind: str = "checkpoint"
    weights_only: bool = False


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


def _choose(source: str | os.PathLike[str], verify: str) -> _Chosen:
    """The newest committed checkpoint under ``source`` whose model and trainer state
    verify, or the artifact ``source`` names (see the module docstring)."""
    if verify not in _VERIFY:
        raise CheckpointError(f"verify must be one of {list(_VERIFY)}, got {verify!r}")
    given = str(source)
    path = Path(source).expanduser().absolute()
    if not _is_dir(path):
        raise CheckpointSourceError(
            f"{given}: no such directory; point at {_KINDS}", source=given, runs=[]
        )
    artifacts = _artifact_source(path)
    if artifacts is not None:
        return _choose_artifact(*artifacts, verify=verify, given=given)
    dirs, pinned = _checkpoint_dirs(path, given)
    passed_over: list[str] = []
    for directory in dirs:
        store = LocalStore(str(directory.resolve()), fs=_FS)
        iterations = [pinned] if pinned is not None else list_iterations(store)
        for iteration in iterations:
            try:
                return _of_checkpoint(_verify_model(store, iteration, verify, given))
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


def _verify_model(store: LocalStore, iteration: int, verify: str, given: str) -> VerifiedCheckpoint:
    """Verify ``iteration`` model-only; a weights-only one without its optimizer entries.

    Raises:
        CheckpointCorruptError: retention invalidated it, or it does not verify.
    """
    mark = read_mark(store, iteration)
    if mark is not None and mark.kind is MarkKind.INVALIDATED:
        raise invalidated_refusal(
            store, mark, source=given, newest=newest_resumable(store), loading=True
        )
    return verify_checkpoint(
        store, iteration, level=verify, only=(_MODEL,), weights_only=mark is not None
    )


def _of_checkpoint(verified: VerifiedCheckpoint) -> _Chosen:
    location = verified.location.removeprefix("local:")
    return _Chosen(
        location,
        verified.iteration,
        verified.trainer,
        verified.payloads,
        weights_only=verified.weights_only,
    )


def _artifact_source(path: Path) -> tuple[Path, int | None] | None:
    """``(checkpoint_artifacts root, pinned iteration or None)`` when ``path`` is a
    ``checkpoint_artifacts/`` dir or an artifact in one (or an ``iter_*`` dir holding an
    artifact manifest); ``None`` for any other source."""
    if path.name == ARTIFACTS_DIR:
        return path, None
    iteration = parse_iter_dirname(path.name)
    if iteration is None:
        return None
    manifest = _FS.stat(str(path / ARTIFACT_MANIFEST_NAME))
    if path.parent.name == ARTIFACTS_DIR or manifest is not None:
        return path.parent, iteration
    return None


def _choose_artifact(root: Path, pinned: int | None, *, verify: str, given: str) -> _Chosen:
    """The artifact ``pinned`` under ``root`` (or the newest with ``model`` that verifies),
    verified model-only. ``root`` exists (the source was stat'ed), so the store creates
    nothing."""
    store = LocalStore(str(root.resolve()), fs=_FS)
    iterations = [pinned] if pinned is not None else list_iterations(store)
    passed_over: list[str] = []
    for iteration in iterations:
        try:
            record = verify_artifact(store, iteration, level="manifest")
            plan = record.manifest.plan
            if "model" not in plan.components:
                if pinned is None:
                    continue
                raise CheckpointSourceError(
                    f"{root / iter_dirname(iteration)}: is an artifact of plan {plan}, which "
                    f"holds no model weights ({_MODEL}); load_weights needs an artifact whose plan "
                    "includes model, or a full checkpoint",
                    source=given,
                    passed_over=[],
                )
            verified = verify_artifact(
                store, iteration, level=verify, keep_payloads=True, only=(_MODEL,)
            )
        except (StatecraftError, OSError) as exc:  # does not verify: pass over, with why
            if pinned is not None:
                raise
            passed_over.append(str(exc))
            log.warning("passed over %s/iter_%09d: %s", root, iteration, exc)
            continue
        location = verified.where.removeprefix("local:")
        return _Chosen(location, iteration, verified.trainer, verified.payloads, "artifact")
    raise CheckpointSourceError(
        f"{given}: no committed artifact with model that verifies (verify={verify}; "
        f"{len(passed_over)} passed over"
        + (f", the newest because {passed_over[0]}" if passed_over else "")
        + "); run statecraft inspect on the attempt to see every artifact's state",
        source=given,
        passed_over=passed_over,
    )


def load_weights(
    model: Any, source: str | os.PathLike[str], *, verify: str = "digest"
) -> LoadedCheckpoint:
    """Load the weights of the newest committed checkpoint under ``source`` (or the given
    ``iter_*`` one, or the given partial artifact ``checkpoint_artifacts/iter_*`` whose plan
    includes ``model``) into ``model``; see the module docstring for ``source``. Reads only:
    no attempt, lease, pointer or directory is created.

    Args:
        model: an ``nn.Module`` built with the saving run's shapes and dtypes.
        verify: ``"digest"`` (model.pt's and trainer.pt's content digests) or ``"size"``.

    Returns:
        which checkpoint was loaded, and the loop state saved with it.

    Raises:
        CheckpointSourceError: ``source`` does not exist, holds no run or several, or no
            checkpoint under it verifies; an artifact source whose plan has no ``model``.
        CheckpointCorruptError / TrainerStateError: an ``iter_*`` or artifact source does
            not verify (not committed, damaged, a full-checkpoint manifest in an artifact
            directory, ...).
        ResumeError: the model does not fit the checkpoint (names, shapes, dtypes; the model
            is unchanged).
    """
    chosen = _choose(source, verify)
    state, _ = split_ema(chosen.payloads.pop(_MODEL))  # the model's entries, not a tracked EMA's
    location = chosen.location
    check_fit(_Model(model), chosen.trainer, Components(state, None, None), location=location)
    model.load_state_dict(state)
    pruned = " (weights-only: optimizer removed by retention)" if chosen.weights_only else ""
    log.info(
        "loaded the weights of %s %s (iter %d)%s", chosen.kind, location, chosen.iteration, pruned
    )
    return LoadedCheckpoint(location, chosen.iteration, _loop_state(chosen), chosen.kind)


def read_model_state(
    source: str | os.PathLike[str], *, verify: str = "digest"
) -> tuple[dict[str, Any] | None, LoadedCheckpoint]:
    """The verified ``model.pt`` state of the checkpoint :func:`load_weights` would load from
    ``source``, and which one it is; nothing is loaded (``init_from`` checks it first). The
    state is ``None`` for a ``checkpoint_format=dcp`` checkpoint (its ``model/`` directory is
    for the caller to verify and read).

    Raises:
        CheckpointSourceError / CheckpointCorruptError / TrainerStateError: as
            :func:`load_weights`.
    """
    chosen = _choose(source, verify)
    state = chosen.payloads.pop(_MODEL, None)  # None: a DCP checkpoint (model/ directory)
    state, _ = split_ema(state)  # the model's own entries (a maintained EMA's: @ema.*)
    loaded = LoadedCheckpoint(chosen.location, chosen.iteration, _loop_state(chosen), chosen.kind)
    return state, loaded


def read_loop_state(source: str | os.PathLike[str], *, verify: str = "digest") -> dict[str, Any]:
    """The loop state (``Checkpointer.loop_state`` when it saved) of the checkpoint
    :func:`load_weights` would load from ``source``, e.g. ``model_args`` to build the model.

    Raises:
        CheckpointSourceError / CheckpointCorruptError / TrainerStateError: as
            :func:`load_weights`.
    """
    return _loop_state(_choose(source, verify))


def _loop_state(chosen: _Chosen) -> dict[str, Any]:
    trainer = chosen.trainer
    return copy.deepcopy(dict(trainer.extra)) if trainer is not None else {}


@attrs.frozen
class _Model:
    """What the compatibility check needs of the tracked objects: a model, no optimizer."""

    model: Any
    optimizer: Any = None
