"""statecraft: crash-consistent checkpoint and resume for PyTorch training.

The public API a training loop needs; everything else lives in submodules.

Each name loads its module (and torch) on first use, so ``import statecraft`` and the
``statecraft`` command stay fast for commands that never touch a tensor (``--help``,
``machines check``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from statecraft._version import __version__

if TYPE_CHECKING:
    from statecraft.checkpoint.artifacts.saving import ArtifactReport
    from statecraft.checkpoint.async_writes.write_slot import PendingSave
    from statecraft.checkpoint.catalog_api import CheckpointInfo, CheckpointList
    from statecraft.checkpoint.config import CheckpointConfig
    from statecraft.checkpoint.facade.catalog import checkpoints, load_weights
    from statecraft.checkpoint.facade.checkpointer import Checkpointer, SaveReport
    from statecraft.checkpoint.facade.step import StepEnd
    from statecraft.checkpoint.init_from import InitReport, init_from
    from statecraft.checkpoint.kernel.layout import RunIdentity
    from statecraft.checkpoint.kernel.validation_records import ValidationStage
    from statecraft.checkpoint.resume.bindings import ResumeResult
    from statecraft.checkpoint.resume.eval_load import LoadedCheckpoint, read_loop_state
    from statecraft.checkpoint.retention.policies import AnyOf, BestN, EveryNSteps, KeepFn, LatestN
    from statecraft.checkpoint.retention.run import RetentionPlan, RetentionReport
    from statecraft.checkpoint.state import Outcome, SchedulerIdentity, UpdateClocks
    from statecraft.checkpoint.triggers import EveryNEpochs, EveryNSeconds, SaveFn
    from statecraft.checkpoint.validation.saving import ValidationReport

__all__ = [
    "AnyOf",
    "ArtifactReport",
    "BestN",
    "CheckpointConfig",
    "CheckpointInfo",
    "CheckpointList",
    "Checkpointer",
    "EveryNEpochs",
    "EveryNSeconds",
    "EveryNSteps",
    "InitReport",
    "KeepFn",
    "LatestN",
    "LoadedCheckpoint",
    "Outcome",
    "PendingSave",
    "ResumeResult",
    "RetentionPlan",
    "RetentionReport",
    "RunIdentity",
    "SaveFn",
    "SaveReport",
    "SchedulerIdentity",
    "StepEnd",
    "UpdateClocks",
    "ValidationReport",
    "ValidationStage",
    "__version__",
    "checkpoints",
    "init_from",
    "load_weights",
    "read_loop_state",
]

_LAZY = {
    "AnyOf": "statecraft.checkpoint.retention.policies",
    "ArtifactReport": "statecraft.checkpoint.artifacts.saving",
    "BestN": "statecraft.checkpoint.retention.policies",
    "CheckpointConfig": "statecraft.checkpoint.config",
    "CheckpointInfo": "statecraft.checkpoint.catalog_api",
    "CheckpointList": "statecraft.checkpoint.catalog_api",
    "Checkpointer": "statecraft.checkpoint.facade.checkpointer",
    "EveryNEpochs": "statecraft.checkpoint.triggers",
    "EveryNSeconds": "statecraft.checkpoint.triggers",
    "EveryNSteps": "statecraft.checkpoint.retention.policies",
    "InitReport": "statecraft.checkpoint.init_from",
    "KeepFn": "statecraft.checkpoint.retention.policies",
    "LatestN": "statecraft.checkpoint.retention.policies",
    "LoadedCheckpoint": "statecraft.checkpoint.resume.eval_load",
    "Outcome": "statecraft.checkpoint.state",
    "PendingSave": "statecraft.checkpoint.async_writes.write_slot",
    "ResumeResult": "statecraft.checkpoint.resume.bindings",
    "RetentionPlan": "statecraft.checkpoint.retention.run",
    "RetentionReport": "statecraft.checkpoint.retention.run",
    "RunIdentity": "statecraft.checkpoint.kernel.layout",
    "SaveFn": "statecraft.checkpoint.triggers",
    "SaveReport": "statecraft.checkpoint.facade.checkpointer",
    "SchedulerIdentity": "statecraft.checkpoint.state",
    "StepEnd": "statecraft.checkpoint.facade.step",
    "UpdateClocks": "statecraft.checkpoint.state",
    "ValidationReport": "statecraft.checkpoint.validation.saving",
    "ValidationStage": "statecraft.checkpoint.kernel.validation_records",
    "checkpoints": "statecraft.checkpoint.facade.catalog",
    "init_from": "statecraft.checkpoint.init_from",
    "load_weights": "statecraft.checkpoint.facade.catalog",
    "read_loop_state": "statecraft.checkpoint.resume.eval_load",
}


def __getattr__(name: str) -> Any:
    """The public names, imported from their modules on first use (then cached here)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
