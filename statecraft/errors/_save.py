"""Refusals and failures of a save and what follows it: another writer, an iteration or
artifact already committed, a save before ``resume()``, a failed evaluation or retention pass, a
save after the run stopped, a refused direct object-store save."""

from __future__ import annotations

from statecraft.errors._base import StatecraftError
from statecraft.errors._checkpoint import CheckpointError

__all__ = [
    "ArtifactCommittedError",
    "DirectSaveError",
    "IterationCommittedError",
    "ResumeRequiredError",
    "RetentionError",
    "RoleWriteError",
    "RunStoppedError",
    "ValidationFailedError",
    "WriterLeaseError",
]


class WriterLeaseError(StatecraftError, RuntimeError):
    """Another process owns (or took over) the writer lease of this attempt: two writers of
    one run. Fields: ``path`` (the lease file), ``owner``, ``host``, ``pid``, ``generation``,
    ``since`` (the other owner's record, when readable)."""

    code = "writer_lease"


class IterationCommittedError(StatecraftError, FileExistsError):
    """A save was about to write into an iteration that already holds a manifest (another
    writer committed it): a committed iteration is never rewritten. Fields: ``path``."""

    code = "iteration_committed"


class ResumeRequiredError(CheckpointError):
    """A save was asked for in an attempt that already holds committed checkpoints, by a
    process that never called ``Checkpointer.resume()``: its state is not the continuation of
    those checkpoints, so saving would mix two trajectories in one checkpoint series. Nothing
    was written. Fields: ``attempt`` (the attempt directory), ``iteration`` (its newest
    committed iteration)."""

    code = "resume_required"


class ArtifactCommittedError(CheckpointError, FileExistsError):
    """A save was asked for at a step whose partial artifact is already committed: a
    committed artifact is never re-committed (no content identity proves that replayed
    training reproduced the same tensors). Refused before any writer ran; nothing was
    touched. Fields: ``path`` (the artifact directory), ``iteration``."""

    code = "artifact_committed"


class ValidationFailedError(CheckpointError):
    """The evaluation callable raised, or returned something that is not a mapping of metric
    names to finite numbers. A durable validation checkpoint stays evaluation-pending (a
    resumed run retries the evaluation); an artifact committed before an ephemeral evaluation
    stays committed. Fields: ``step``, ``iteration`` (the pending checkpoint, or ``None``),
    ``cause`` (the callable's error, as text)."""

    code = "validation_failed"


class RetentionError(CheckpointError):
    """A retention pass could not finish removing what its policies did not keep. The save it
    followed is committed and durable (``latest`` names it); nothing committed and kept was
    touched; an iteration it had started to remove is marked (weights-only or invalidated) and
    the next pass finishes it. Fields: ``path`` (what could not be removed), ``iteration``."""

    code = "retention_failed"


class RunStoppedError(CheckpointError):
    """A ``step_end()`` or ``save()`` after the run was stopped for termination (preemption,
    timeout, a deadline): the emergency save and the DONE record are written and the loop
    must end. Nothing was written. Fields: ``step`` (where it stopped), ``reason``
    (``sentinel``, ``signal SIGTERM``, ...)."""

    code = "run_stopped"


class RoleWriteError(CheckpointError):
    """One role's write of a multi-role boundary failed, so the boundary failed: no
    ``_SUCCESS`` was written and nothing is adopted. Fields: ``role``, ``iteration``,
    ``path``."""

    code = "role_write_failed"


class DirectSaveError(CheckpointError):
    """A direct object-store primary save (``checkpoint_store.backend=object_store``) was
    refused or stopped: latest names a newer iteration, or the DCP save did not record what the
    commit needs. Nothing committed was changed. Fields: ``path``, ``problem``."""

    code = "direct_save"

    def __init__(self, path: str, problem: str, what_to_do: str = "") -> None:
        tail = f" {what_to_do}" if what_to_do else ""
        super().__init__(f"{path}: {problem}.{tail}", path=path, problem=problem)
