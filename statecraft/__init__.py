"""statecraft: crash-consistent checkpoint and resume for PyTorch training.

The public API a training loop needs; everything else lives in submodules.
"""

from statecraft.checkpoint.artifact_saving import ArtifactReport
from statecraft.checkpoint.checkpointer import Checkpointer, SaveReport
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.eval_load import LoadedCheckpoint, load_weights, read_loop_state
from statecraft.checkpoint.layout import RunIdentity
from statecraft.checkpoint.retention import RetentionPlan, RetentionReport
from statecraft.checkpoint.retention_policies import AnyOf, BestN, EveryNSteps, KeepFn, LatestN
from statecraft.checkpoint.state import Outcome, SchedulerIdentity, UpdateClocks
from statecraft.checkpoint.step import StepEnd
from statecraft.checkpoint.transactions.resume import ResumeResult
from statecraft.checkpoint.validation_records import ValidationStage
from statecraft.checkpoint.validation_saving import ValidationReport
from statecraft.checkpoint.write_slot import PendingSave

__version__ = "0.1.0"

__all__ = [
    "AnyOf",
    "ArtifactReport",
    "BestN",
    "CheckpointConfig",
    "Checkpointer",
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
    "SaveReport",
    "SchedulerIdentity",
    "StepEnd",
    "UpdateClocks",
    "ValidationReport",
    "ValidationStage",
    "__version__",
    "load_weights",
    "read_loop_state",
]
