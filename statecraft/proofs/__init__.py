"""The crash explorer used by ``tests/`` and by ``statecraft crashcheck``."""

from statecraft.proofs.explorer import (
    CrashPoint,
    ExploreOptions,
    ScenarioReport,
    Violation,
    check_crash_state,
    crash_points,
    explore,
    explore_all,
    reference_run,
    run_to_crash,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation, Scenario

__all__ = [
    "CheckContext",
    "CrashPoint",
    "ExploreOptions",
    "GuaranteeViolation",
    "Scenario",
    "ScenarioReport",
    "Violation",
    "check_crash_state",
    "crash_points",
    "explore",
    "explore_all",
    "reference_run",
    "run_to_crash",
]
