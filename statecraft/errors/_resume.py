"""Refusals of a resume (and of reading a checkpoint back): no safe source, a source behind the
partial artifacts, optimizer state removed by retention, another world size, a differing
validation identity, a weights source that does not lead to one verified checkpoint."""

from __future__ import annotations

from statecraft.errors._checkpoint import CheckpointError, TrainerStateError

__all__ = [
    "ArtifactResumeError",
    "CheckpointSourceError",
    "InitFromError",
    "ResumeError",
    "ValidationIdentityError",
    "WeightsOnlyResumeError",
    "WorldSizeChangedError",
]


class ResumeError(CheckpointError):
    """Resume cannot pick a source without risking silent divergence; nothing was loaded."""

    code = "resume_refused"


class ArtifactResumeError(ResumeError):
    """A resume was refused because of the attempt's partial artifacts: ``resume=auto`` found
    committed artifacts but no resumable checkpoint, or only one older than the newest
    artifact; an explicit source is behind the newest artifact, has no derivable iteration,
    or is itself an artifact. Nothing was loaded. Fields: ``artifact`` (the newest artifact's
    directory), ``checkpoint`` (the checkpoint considered, or ``None``), ``reason``."""

    code = "artifact_resume_refused"


class WeightsOnlyResumeError(ResumeError):
    """A resume was refused because the checkpoint's optimizer state was removed by retention
    (``keep_optim_last``): it holds weights and trainer state only, enough for evaluation or
    ``load_weights``, not for exact resume. Nothing was loaded. Fields: ``path`` (the
    iteration), ``policy`` (what pruned it), ``newest_resumable`` (the newest iteration that
    still holds its optimizer, or ``None``)."""

    code = "weights_only_resume"


class WorldSizeChangedError(ResumeError):
    """A consolidated checkpoint was resumed at another world size: consolidated checkpoints
    resume only at the same world size (``checkpoint_format=dcp`` reshards). Nothing was
    loaded. Fields: ``path`` (the checkpoint), ``saved_world_size``, ``world_size``."""

    code = "world_size_changed"


class ValidationIdentityError(TrainerStateError):
    """Exact resume refused: the checkpoint's recorded validation identity (enabled, source,
    config) differs from this run's. Fields: ``source`` (the ``trainer.pt``), ``problems``
    (one line per differing field)."""

    code = "validation_identity"


class CheckpointSourceError(CheckpointError, FileNotFoundError):
    """``statecraft.load_weights`` / ``read_loop_state``: the source path does not lead to
    exactly one run with a committed checkpoint that verifies (it does not exist, holds no
    run, holds several, or none of its checkpoints verifies). Fields: ``source`` (the path
    given), ``runs`` (the runs found, when several), ``passed_over`` (each checkpoint tried
    and why it was not used)."""

    code = "checkpoint_source"


class InitFromError(CheckpointError, ValueError):
    """``init_from``: the source cannot initialize the model: it is missing, of no known kind,
    does not verify, or its weights do not fit the model. Nothing was changed (every key and
    shape is checked before the first tensor is copied). Fields: ``source`` (what was given),
    ``missing`` (model keys the source lacks), ``unexpected`` (source keys the model lacks),
    ``shapes`` (``key: source shape != model shape``)."""

    code = "init_from"
