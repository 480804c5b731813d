"""Errors of committed units: checkpoint directories a framework wrote (a Lightning
checkpoint generation, a Hugging Face ``checkpoint-N`` folder) that statecraft seals."""

from __future__ import annotations

from statecraft.errors._checkpoint import CheckpointError

__all__ = ["UnitCommittedError", "UnitDamagedError", "UnitError", "UnitNotCommittedError"]


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
