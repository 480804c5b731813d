"""What changes across one ``Checkpointer`` run: :class:`RunState`, the one mutable record the
facade's helpers update (what is fixed lives in
:mod:`~statecraft.checkpoint.facade.run_context`).

Every rank holds its own and updates it alike (every rank calls the facade's methods in the
same order); the reports (``saves``, ``artifacts``) are rank 0's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs

from statecraft.checkpoint.artifacts.saving import ArtifactReport
from statecraft.checkpoint.async_writes.role_slots import BackgroundWrites
from statecraft.checkpoint.facade.lifecycle import Lifecycle
from statecraft.checkpoint.facade.run_context import OpenAttempt
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.init_from import InitReport, ModelCopies
from statecraft.checkpoint.kernel.evaluation import Evaluation
from statecraft.checkpoint.kernel.validation_records import ValidationIdentity
from statecraft.checkpoint.resume.bindings import Tracked
from statecraft.checkpoint.retention.run import RetentionReport
from statecraft.checkpoint.roles.run import RoleRun
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.stop.records import StopDecision
from statecraft.engine import RunResult
from statecraft.errors import TrackingError
from statecraft.storage.base import Store

if TYPE_CHECKING:  # the direct primary is imported on use (object_store runs only)
    from statecraft.checkpoint.direct.root import DirectRoot
    from statecraft.checkpoint.fencing.object_lease_handle import ObjectStoreLease

__all__ = ["RunState"]


@attrs.define(eq=False)
class RunState:
    """One run's moving parts.

    Attributes:
        writes: every role's background write (joined before each writing boundary).
        tracked: the registered training objects and their update clocks.
        lifecycle: resumed or not, saved or not, may save (the resume status).
        opened: the attempt once opened (``None`` before the first ``resume()`` / save).
        evaluation: the loop's registered evaluation (``validate_with``), else ``None``.
        identity: the run's validation identity (recorded in every ``trainer.pt``).
        artifacts_store: the ``checkpoint_artifacts`` root, created by the first artifact save.
        direct_root / direct_lease: ``backend=object_store``'s root and rank 0's lease on it
            (set by the direct resume).
        saves / artifacts: the reports of the saves and artifacts (rank 0).
        retained: the retention passes run after a durable validation's publication.
        last_saved_step / last_validated_step: the newest step saved / validated by this run.
        last_saved_at: the monotonic time of this run's last save (its start before the first;
            what a wall-clock save trigger measures from).
        last_resume_run: the resume machine's run and trace.
        stopped / stop_end: the stop decided at a ``step_end()``, and what that boundary did.
        final: what ``finalize()`` did.
        closed: ``close()`` ran (no resume or save any more).
        roles: a multi-role loop's roles (``track_role``), else ``None``.
        copies / init_report: the model's copies (``track(reference=...)``) and what
            ``init_from`` loaded at this start (``None``: nothing).
    """

    writes: BackgroundWrites
    tracked: Tracked = attrs.field(factory=Tracked)
    lifecycle: Lifecycle = attrs.field(factory=Lifecycle)
    opened: OpenAttempt | None = None
    evaluation: Evaluation | None = None
    identity: ValidationIdentity = attrs.field(factory=ValidationIdentity)
    artifacts_store: Store | None = None
    direct_root: DirectRoot | None = None
    direct_lease: ObjectStoreLease | None = None
    saves: list[SaveReport] = attrs.field(factory=list)
    artifacts: list[ArtifactReport] = attrs.field(factory=list)
    retained: list[RetentionReport] = attrs.field(factory=list)
    last_saved_step: int | None = None
    last_validated_step: int | None = None
    last_saved_at: float = attrs.field(factory=time.monotonic)
    last_resume_run: RunResult | None = None
    stopped: StopDecision | None = None
    stop_end: StepEnd | None = None
    final: StepEnd | None = None
    closed: bool = False
    roles: RoleRun | None = None
    copies: ModelCopies = attrs.field(factory=ModelCopies)
    init_report: InitReport | None = None

    @property
    def step(self) -> int:
        """Applied optimizer updates so far (the checkpoint iteration axis)."""
        return self.tracked.clocks.optimizer_step

    def require_tracked(self, action: str) -> None:
        """Refuse ``action`` before ``track()`` registered a model and an optimizer.

        Raises:
            TrackingError: naming ``action`` and the fix.
        """
        if self.tracked.model is None or self.tracked.optimizer is None:
            raise TrackingError(
                f"cannot {action}: call Checkpointer.track(model=..., optimizer=...) first"
            )

    def mark_saved(self, step: int) -> None:
        """Record that ``step`` was written by this process (a checkpoint or an artifact)."""
        self.last_saved_step = self.lifecycle.saved = step
        self.last_saved_at = time.monotonic()
