"""statecraft: crash-consistent checkpoint and resume for PyTorch training.

The public API a training loop needs; everything else lives in submodules.
"""

from statecraft._version import __version__
from statecraft.checkpoint.artifacts.saving import ArtifactReport
from statecraft.checkpoint.async_writes.write_slot import PendingSave
from statecraft.checkpoint.catalog_api import CheckpointInfo, CheckpointList
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.facade.catalog import checkpoints, load_weights
from statecraft.checkpoint.facade.checkpointer import Checkpointer, SaveReport
from statecraft.checkpoint.facade.step import StepEnd
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
    "load_weights",
    "read_loop_state",
]
