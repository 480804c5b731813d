"""The exception hierarchy of statecraft.

Every error statecraft raises derives from :class:`StatecraftError` and also from the builtin
that matches its meaning (a configuration error is a ``ValueError``, a store conflict is a
``FileExistsError``), so callers can catch either. Messages name the culprit, state what was
expected and what was found, and end with what to do. Structured fields carry the same facts
for programs (the CLI's ``--json`` output reuses them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "ArchiveError",
    "ArchiveMismatchError",
    "ArtifactCommittedError",
    "ArtifactResumeError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointSourceError",
    "ConfigError",
    "ConfigIssue",
    "CredentialsError",
    "DemoError",
    "DirectSaveError",
    "DiskFullError",
    "FetchDestinationExistsError",
    "GuaranteeViolation",
    "InspectError",
    "IterationCommittedError",
    "MachineDefinitionError",
    "MachineRuntimeError",
    "NotSupportedYetError",
    "ObjectRequestError",
    "PlanDriftError",
    "PreconditionFailed",
    "ResumeError",
    "ResumeRequiredError",
    "RetentionError",
    "RunStoppedError",
    "SpecError",
    "SpecialFileError",
    "StatecraftError",
    "StoreConflictError",
    "StoreError",
    "TrackingError",
    "TrainerStateError",
    "UnitCommittedError",
    "UnitDamagedError",
    "UnitError",
    "UnitNotCommittedError",
    "UnsafeStateError",
    "UploadRefusedError",
    "ValidationFailedError",
    "ValidationIdentityError",
    "WeightsOnlyResumeError",
    "WorldSizeChangedError",
    "WriterLeaseError",
]


def _rebuild(cls: type[StatecraftError], message: str, fields: dict[str, Any]) -> StatecraftError:
    """Unpickle an error without calling its ``__init__`` (whose signature may differ)."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error._set_fields(fields)
    return error


class StatecraftError(Exception):
    """Root of every error statecraft raises on purpose.

    Args:
        message: what was found, what was expected, what to do.
        fields: the same facts for programs (a path, a knob, a state); each is also an
            attribute, and :meth:`to_json` returns them with the code and the message.

    Errors pickle with their fields (they cross process boundaries: rank 0's error is
    re-raised on every rank).
    """

    code: str = "statecraft_error"

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self._set_fields(fields)

    def _set_fields(self, fields: dict[str, Any]) -> None:
        self.fields: dict[str, Any] = dict(fields)
        for name, value in fields.items():
            setattr(self, name, value)

    def to_json(self) -> dict[str, Any]:
        """``{"code", "message", **fields}`` with non-JSON values rendered as text."""
        out: dict[str, Any] = {"code": self.code, "message": str(self)}
        for name, value in getattr(self, "fields", {}).items():
            is_json = value is None or isinstance(value, str | int | float | bool)
            out[name] = (
                value
                if is_json
                else [str(v) for v in value]
                if isinstance(value, list | tuple)
                else str(value)
            )
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), str(self), getattr(self, "fields", {})), self.__dict__)


class MachineDefinitionError(StatecraftError, ValueError):
    """A transition table is malformed or does not match its bindings.

    ``problems`` lists every defect found, each already prefixed with its location
    (``machines/save.toml: state 'x': ...``), so one run of the checker reports them all.
    """

    code = "machine_definition"
    source: str
    problems: list[str]

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{source}: {len(problems)} problem(s) in the machine table:\n{lines}",
            source=source,
            problems=list(problems),
        )


class MachineRuntimeError(StatecraftError, RuntimeError):
    """The runner met a situation the table forbids (no or several enabled transitions,
    an observation label the table does not declare)."""

    code = "machine_runtime"
    machine: str
    state: str

    def __init__(self, machine: str, state: str, message: str) -> None:
        super().__init__(
            f"machine {machine!r} in state {state!r}: {message}", machine=machine, state=state
        )


class SpecError(StatecraftError, ValueError):
    """A spec file is malformed or names a check that cannot be imported."""

    code = "spec_definition"


class ConfigIssue:
    """One invalid configuration value: where it is, what was found, what is allowed."""

    __slots__ = ("allowed", "found", "path")

    def __init__(self, path: str, found: object, allowed: str) -> None:
        self.path = path
        self.found = found
        self.allowed = allowed

    def __str__(self) -> str:
        return f"{self.path}: got {self.found!r}; expected {self.allowed}"

    def __repr__(self) -> str:
        return f"ConfigIssue({self.path!r}, {self.found!r}, {self.allowed!r})"


class ConfigError(StatecraftError, ValueError):
    """Configuration values are malformed; ``issues`` lists every one found."""

    code = "config_invalid"
    issues: list[ConfigIssue]
    source: str

    def __init__(self, issues: Iterable[ConfigIssue], *, source: str = "checkpoint config") -> None:
        issues = list(issues)
        lines = "\n".join(f"  - {i}" for i in issues)
        super().__init__(
            f"{source}: {len(issues)} invalid value(s):\n{lines}\n"
            "Fix the listed knobs (YAML file or key=value overrides) and start again.",
            issues=issues,
            source=source,
        )


class NotSupportedYetError(StatecraftError, NotImplementedError):
    """A knob is valid but the feature that would honour it is not built yet.

    Raised instead of silently ignoring the knob.
    """

    code = "not_supported_yet"
    knob: str
    value: object

    def __init__(self, knob: str, value: object, what_to_do: str) -> None:
        super().__init__(
            f"{knob}={value!r} is accepted by the schema but not supported yet by this "
            f"statecraft release; {what_to_do}",
            knob=knob,
            value=value,
        )


class StoreError(StatecraftError, OSError):
    """A store operation failed; the store's durability contract still holds."""

    code = "store_error"


class StoreConflictError(StoreError, FileExistsError):
    """An exclusive create found the name already taken; nothing was overwritten."""

    code = "store_conflict"


class CheckpointError(StatecraftError, RuntimeError):
    """A checkpoint transaction cannot proceed without risking committed state."""

    code = "checkpoint_error"


class PlanDriftError(CheckpointError):
    """A same-iteration retry asked for a different plan than the committed one.

    A committed iteration is never rewritten; the retry fails closed.
    """

    code = "plan_drift"


class CheckpointCorruptError(CheckpointError):
    """A checkpoint's bytes or records do not match what its manifest promises."""

    code = "checkpoint_corrupt"
    path: str
    problem: str

    def __init__(self, path: str, problem: str, what_to_do: str = "") -> None:
        tail = f" {what_to_do}" if what_to_do else ""
        super().__init__(f"{path}: {problem}.{tail}", path=path, problem=problem)


class TrainerStateError(CheckpointError, ValueError):
    """Trainer control state (clocks, RNG, scheduler identity) is malformed or contradictory.

    Fields (when built from a payload): ``source`` (the file), ``problems`` (every bad field).
    """

    code = "trainer_state"
    source: str
    problems: list[str]


class ResumeError(CheckpointError):
    """Resume cannot pick a source without risking silent divergence; nothing was loaded."""

    code = "resume_refused"


class TrackingError(StatecraftError, TypeError):
    """An object registered with ``Checkpointer.track`` cannot be checkpointed, or a required
    one is missing."""

    code = "tracking"


class ObjectRequestError(StoreError):
    """An object-store request failed or its outcome is unknown (the response was lost); look
    before assuming either."""

    code = "object_request"


class PreconditionFailed(StoreConflictError):
    """A conditional request (``If-None-Match: *`` / ``If-Match``) was refused (HTTP 412)."""

    code = "precondition_failed"


class GuaranteeViolation(StatecraftError, AssertionError):
    """Raised by a crash-harness check when its guarantee does not hold in the state it was
    given."""

    code = "guarantee_violation"


class DemoError(StatecraftError, ValueError):
    """``statecraft demo`` cannot run as asked (its output root already holds runs)."""

    code = "demo_invalid"


class InspectError(StatecraftError, FileNotFoundError):
    """``statecraft inspect``: PATH does not exist or holds no checkpoints layout."""

    code = "no_checkpoints_layout"


class DiskFullError(StoreError):
    """The disk filled while a file was written (``ENOSPC``); nothing was published, older
    checkpoints and ``latest_checkpoint.txt`` are untouched.

    Fields: ``path`` (the file being written), ``bytes_needed`` (what the file was expected to
    take, at least what was written so far plus what remained), ``bytes_free`` (free bytes
    on that filesystem after the failure; ``None`` when unknown).
    """

    code = "disk_full"
    path: str
    bytes_needed: int
    bytes_free: int | None
    checkpoint_bytes: int | None

    def __init__(
        self,
        path: str,
        *,
        bytes_needed: int,
        bytes_free: int | None,
        checkpoint_bytes: int | None = None,
    ) -> None:
        free = "unknown" if bytes_free is None else f"{bytes_free:,}"
        whole = (
            f" (the whole checkpoint needs at least {checkpoint_bytes:,} bytes)"
            if checkpoint_bytes is not None
            else ""
        )
        super().__init__(
            f"disk full: writing {path} needed at least {bytes_needed:,} bytes{whole} but only "
            f"{free} bytes are free on its filesystem; nothing was published and older "
            "checkpoints are intact. Free space on that disk, keep fewer checkpoints (the "
            "retention knobs keep_optim_last / keep_model_last), or point output_root at a "
            "larger disk, then "
            "save again",
            path=path,
            bytes_needed=bytes_needed,
            bytes_free=bytes_free,
            checkpoint_bytes=checkpoint_bytes,
        )


class SpecialFileError(StoreError, ValueError):
    """A name where statecraft expects a regular file holds something else (a FIFO, a symbolic
    link, a directory, a device, a socket) or a control file larger than its bound; it was not
    read. Also a ``ValueError``: the content at that name is unusable, like a garbled file.

    Fields: ``path``, ``kind`` (``"fifo"``, ``"symlink"``, ``"directory"``, ``"device"``,
    ``"socket"``, ``"too large"``).
    """

    code = "not_a_regular_file"
    path: str
    kind: str

    def __init__(self, path: str, kind: str, detail: str = "") -> None:
        what = {
            "fifo": "is a FIFO (named pipe), not a regular file",
            "symlink": "is a symbolic link (statecraft never follows links to checkpoint files)",
            "directory": "is a directory, not a regular file",
            "device": "is a device, not a regular file",
            "socket": "is a socket, not a regular file",
        }.get(kind, f"is not a regular file ({kind})")
        if detail:
            what = f"{what}; {detail}"
        super().__init__(
            f"{path} {what}. It was not read and the checkpoint holding it counts as damaged. "
            "Replace it with the real file or move the checkpoint aside",
            path=path,
            kind=kind,
        )


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


class CheckpointSourceError(CheckpointError, FileNotFoundError):
    """``statecraft.load_weights`` / ``read_loop_state``: the source path does not lead to
    exactly one run with a committed checkpoint that verifies (it does not exist, holds no
    run, holds several, or none of its checkpoints verifies). Fields: ``source`` (the path
    given), ``runs`` (the runs found, when several), ``passed_over`` (each checkpoint tried
    and why it was not used)."""

    code = "checkpoint_source"


class UnsafeStateError(TrainerStateError):
    """A save was refused before anything was written: the state to save holds values that
    ``torch.load(weights_only=True)`` cannot read back (a NumPy scalar, a custom class), so
    every resume from the checkpoint would fail. Fields: ``source`` (what was refused),
    ``problems`` (one line per value: key path, type, what to convert it to), ``paths`` (the
    key paths alone)."""

    code = "unsafe_state"


class ArtifactCommittedError(CheckpointError, FileExistsError):
    """A save was asked for at a step whose partial artifact is already committed: a
    committed artifact is never re-committed (no content identity proves that replayed
    training reproduced the same tensors). Refused before any writer ran; nothing was
    touched. Fields: ``path`` (the artifact directory), ``iteration``."""

    code = "artifact_committed"


class ArtifactResumeError(ResumeError):
    """A resume was refused because of the attempt's partial artifacts: ``resume=auto`` found
    committed artifacts but no resumable checkpoint, or only one older than the newest
    artifact; an explicit source is behind the newest artifact, has no derivable iteration,
    or is itself an artifact. Nothing was loaded. Fields: ``artifact`` (the newest artifact's
    directory), ``checkpoint`` (the checkpoint considered, or ``None``), ``reason``."""

    code = "artifact_resume_refused"


class ValidationFailedError(CheckpointError):
    """The evaluation callable raised, or returned something that is not a mapping of metric
    names to finite numbers. A durable validation checkpoint stays evaluation-pending (a
    resumed run retries the evaluation); an artifact committed before an ephemeral evaluation
    stays committed. Fields: ``step``, ``iteration`` (the pending checkpoint, or ``None``),
    ``cause`` (the callable's error, as text)."""

    code = "validation_failed"


class ValidationIdentityError(TrainerStateError):
    """Exact resume refused: the checkpoint's recorded validation identity (enabled, source,
    config) differs from this run's. Fields: ``source`` (the ``trainer.pt``), ``problems``
    (one line per differing field)."""

    code = "validation_identity"


class RetentionError(CheckpointError):
    """A retention pass could not finish removing what its policies did not keep. The save it
    followed is committed and durable (``latest`` names it); nothing committed and kept was
    touched; an iteration it had started to remove is marked (weights-only or invalidated) and
    the next pass finishes it. Fields: ``path`` (what could not be removed), ``iteration``."""

    code = "retention_failed"


class WeightsOnlyResumeError(ResumeError):
    """A resume was refused because the checkpoint's optimizer state was removed by retention
    (``keep_optim_last``): it holds weights and trainer state only, enough for evaluation or
    ``load_weights``, not for exact resume. Nothing was loaded. Fields: ``path`` (the
    iteration), ``policy`` (what pruned it), ``newest_resumable`` (the newest iteration that
    still holds its optimizer, or ``None``)."""

    code = "weights_only_resume"


class RunStoppedError(CheckpointError):
    """A ``step_end()`` or ``save()`` after the run was stopped for termination (preemption,
    timeout, a deadline): the emergency save and the DONE record are written and the loop
    must end. Nothing was written. Fields: ``step`` (where it stopped), ``reason``
    (``sentinel``, ``signal SIGTERM``, ...)."""

    code = "run_stopped"


class CredentialsError(StatecraftError, ValueError):
    """An object-store credentials file is missing, unreadable or malformed. The message names
    the file and the problem and never echoes a secret. Fields: ``path``, ``problem``."""

    code = "credentials_invalid"


class ArchiveError(CheckpointError):
    """An archive transaction (upload, publish, fetch, prune-verified, ``objects``) could not
    finish: a remote object is missing or does not match, a record is malformed, or the
    destination refused. Nothing local was deleted or overwritten; the message says what was
    found, what was expected and what to do. Fields: ``path`` (the local or ``s3://`` culprit),
    ``problem``."""

    code = "archive_failed"

    def __init__(self, path: str, problem: str, what_to_do: str = "") -> None:
        tail = f" {what_to_do}" if what_to_do else ""
        super().__init__(f"{path}: {problem}.{tail}", path=path, problem=problem)


class ArchiveMismatchError(ArchiveError, FileExistsError):
    """A publish was refused before any payload was touched: the destination already holds an
    immutable declaration (or manifest) of a different inventory. Fields as
    :class:`ArchiveError`."""

    code = "archive_mismatch"


class UploadRefusedError(ArchiveError):
    """The archive upload refused an iteration before any request: it is not committed, or is
    weights-only, invalidated, or evaluation/publication-pending. Nothing was touched. Fields
    as :class:`ArchiveError`."""

    code = "upload_refused"


class FetchDestinationExistsError(ArchiveError, FileExistsError):
    """``archive fetch`` refused: the destination directory already exists. A fetch never
    overwrites or merges into a local directory; nothing was changed there. Fields as
    :class:`ArchiveError`."""

    code = "fetch_destination_exists"


class DirectSaveError(CheckpointError):
    """A direct object-store primary save (``checkpoint_store.backend=object_store``) was
    refused or stopped: latest names a newer iteration, or the DCP save did not record what the
    commit needs. Nothing committed was changed. Fields: ``path``, ``problem``."""

    code = "direct_save"

    def __init__(self, path: str, problem: str, what_to_do: str = "") -> None:
        tail = f" {what_to_do}" if what_to_do else ""
        super().__init__(f"{path}: {problem}.{tail}", path=path, problem=problem)


class WorldSizeChangedError(ResumeError):
    """A consolidated checkpoint was resumed at another world size: consolidated checkpoints
    resume only at the same world size (``checkpoint_format=dcp`` reshards). Nothing was
    loaded. Fields: ``path`` (the checkpoint), ``saved_world_size``, ``world_size``."""

    code = "world_size_changed"


class UnitError(CheckpointError):
    """A committed unit (a checkpoint directory a framework wrote: a Lightning checkpoint
    generation, a Hugging Face ``checkpoint-N`` folder) could not be sealed, pruned or loaded.
    Nothing committed was changed. Fields: ``path`` (the unit), ``reason``."""

    code = "unit_failed"


class UnitCommittedError(UnitError, FileExistsError):
    """A seal was refused: the unit already holds its commit manifest. A committed unit is
    never rewritten; nothing was touched. Fields as :class:`UnitError`."""

    code = "unit_committed"


class UnitDamagedError(UnitError):
    """A unit's commit manifest does not decode, or a file it names is missing or differs
    (size or digest). It is never loaded and a seal never writes over it. Fields as
    :class:`UnitError`."""

    code = "unit_damaged"


class UnitNotCommittedError(UnitError, FileNotFoundError):
    """No committed unit where one was asked for: the directory is absent, or holds files
    without a commit manifest (a save that was killed before it committed). Nothing was
    loaded. Fields as :class:`UnitError`."""

    code = "unit_not_committed"
