"""The exception hierarchy of statecraft.

Every error statecraft raises derives from :class:`StatecraftError` and also from the builtin
that matches its meaning (a configuration error is a ``ValueError``, a store conflict is a
``FileExistsError``), so callers can catch either. Messages name the culprit, state what was
expected and what was found, and end with what to do. Structured fields carry the same facts
for programs (the CLI's ``--json`` output reuses them).

The classes live in private modules by theme (``_base``, ``_machines``, ``_config``, ``_store``,
``_checkpoint``, ``_save``, ``_resume``, ``_archive``, ``_units``, ``_commands``); this module is
their one public home. Each class's ``__module__`` is set to ``statecraft.errors``, so a pickled
error (and a traceback) names ``statecraft.errors.<Class>``: the path stays importable however
the private modules are arranged, and pickles written before the split still load.
"""

from __future__ import annotations

from statecraft.errors._archive import (
    ArchiveError,
    ArchiveMismatchError,
    FetchDestinationExistsError,
    UploadRefusedError,
)
from statecraft.errors._base import StatecraftError, _rebuild
from statecraft.errors._checkpoint import (
    CheckpointCorruptError,
    CheckpointError,
    PlanDriftError,
    TrackingError,
    TrainerStateError,
    UnsafeStateError,
)
from statecraft.errors._commands import DemoError, FigureUnavailable, InspectError
from statecraft.errors._config import ConfigError, ConfigIssue, NotSupportedYetError
from statecraft.errors._machines import (
    GuaranteeViolation,
    MachineDefinitionError,
    MachineRuntimeError,
    SpecError,
)
from statecraft.errors._resume import (
    ArtifactResumeError,
    CheckpointSourceError,
    InitFromError,
    ResumeError,
    ValidationIdentityError,
    WeightsOnlyResumeError,
    WorldSizeChangedError,
)
from statecraft.errors._save import (
    ArtifactCommittedError,
    DirectSaveError,
    IterationCommittedError,
    ResumeRequiredError,
    RetentionError,
    RoleWriteError,
    RunStoppedError,
    ValidationFailedError,
    WriterLeaseError,
)
from statecraft.errors._store import (
    CredentialsError,
    DiskFullError,
    ObjectRequestError,
    PreconditionFailed,
    SpecialFileError,
    StoreConflictError,
    StoreError,
)
from statecraft.errors._units import (
    UnitCommittedError,
    UnitDamagedError,
    UnitError,
    UnitNotCommittedError,
)

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
    "FigureUnavailable",
    "GuaranteeViolation",
    "InitFromError",
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
    "RoleWriteError",
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

# Pickles and tracebacks name the public path (see the module doc); ``_rebuild`` is the
# unpickling function every error's ``__reduce__`` names, so it is published here as well.
for _published in (*(globals()[name] for name in __all__), _rebuild):
    _published.__module__ = __name__
del _published
