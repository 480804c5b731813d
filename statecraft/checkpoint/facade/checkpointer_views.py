"""The attributes a :class:`~statecraft.checkpoint.facade.checkpointer.Checkpointer` has always
exposed (``ckpt.config``, ``ckpt.attempt``, ``ckpt.saves``, ``ckpt.final`` ...), read from its
:class:`~statecraft.checkpoint.facade.run_context.RunContext` and
:class:`~statecraft.checkpoint.facade.run_state.RunState`. Kept apart so the facade module stays
the list of the loop's calls.
"""

from __future__ import annotations

from typing import Any

from statecraft.checkpoint.artifacts.saving import ArtifactReport
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.facade.run_context import RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.init_from import InitReport
from statecraft.checkpoint.kernel.layout import RunAttempt, RunIdentity
from statecraft.checkpoint.resume.bindings import Tracked
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.state import UpdateClocks
from statecraft.checkpoint.stop.records import StopDecision
from statecraft.checkpoint.stop.termination import TerminationWatch
from statecraft.engine import RunResult
from statecraft.errors import TrackingError
from statecraft.parallel.collectives import Collective
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem

__all__ = ["CheckpointerViews"]


class CheckpointerViews:
    """Read access to one run's context and state under the ``Checkpointer``'s attribute names.

    Attributes:
        run_context: what is fixed for the run (in-package: the facade's helpers take it).
        run_state: what changes across the run (in-package, likewise).
    """

    run_context: RunContext
    run_state: RunState

    @property
    def config(self) -> CheckpointConfig:
        """The checkpoint knobs."""
        return self.run_context.config

    @property
    def run(self) -> RunIdentity:
        """The job's identity (``<project>/<group>/<name>``)."""
        return self.run_context.identity

    @property
    def output_root(self) -> str:
        """The absolute directory all runs live under."""
        return self.run_context.output_root

    @property
    def init_report(self) -> InitReport | None:
        """What ``init_from`` loaded at this run's start (``resume()``): a fresh start's model
        and frozen reference, a resumed one's frozen reference; ``None``: nothing."""
        return self.run_state.init_report

    @property
    def collective(self) -> Collective:
        """Rank coordination."""
        return self.run_context.collective

    @property
    def filesystem(self) -> Filesystem | None:
        """What the local stores act through (``None``: the real OS)."""
        return self.run_context.filesystem

    @property
    def retention(self) -> RetentionPlan:
        """The retention plan run after each durable save."""
        return self.run_context.retention

    @property
    def termination(self) -> TerminationWatch:
        """The termination watch (signals, sentinel file, deadline)."""
        return self.run_context.termination

    @property
    def tracked(self) -> Tracked:
        """The registered training objects and their update clocks."""
        return self.run_state.tracked

    @property
    def clocks(self) -> UpdateClocks:
        """The update clocks (``record()`` advances them)."""
        return self.run_state.tracked.clocks

    @property
    def step(self) -> int:
        """Applied optimizer updates so far (the checkpoint iteration axis)."""
        return self.run_state.step

    @property
    def attempt(self) -> RunAttempt | None:
        """The open attempt (``None`` before the first ``resume()`` / save)."""
        opened = self.run_state.opened
        return None if opened is None else opened.attempt

    @property
    def store(self) -> Store | None:
        """The open attempt's checkpoints store (``None`` before it opens)."""
        opened = self.run_state.opened
        return None if opened is None else opened.store

    @property
    def lease(self) -> WriterLease | None:
        """Rank 0's writer lease on the attempt (``None`` elsewhere, and after ``close()``)."""
        opened = self.run_state.opened
        return None if opened is None else opened.lease

    @property
    def saves(self) -> list[SaveReport]:
        """The reports of the saves so far (rank 0; an asynchronous one once joined)."""
        return self.run_state.saves

    @property
    def artifacts(self) -> list[ArtifactReport]:
        """The reports of the partial artifacts so far (rank 0)."""
        return self.run_state.artifacts

    @property
    def last_saved_step(self) -> int | None:
        """The newest step this run saved (or resumed from); ``None``: none."""
        return self.run_state.last_saved_step

    @last_saved_step.setter
    def last_saved_step(self, step: int | None) -> None:
        self.run_state.last_saved_step = step

    @property
    def last_validated_step(self) -> int | None:
        """The newest step this run validated; ``None``: none."""
        return self.run_state.last_validated_step

    @property
    def last_resume_run(self) -> RunResult | None:
        """The resume machine's run and trace (``None`` before ``resume()``)."""
        return self.run_state.last_resume_run

    @property
    def final(self) -> StepEnd | None:
        """What ``finalize()`` did (``None`` before it)."""
        return self.run_state.final

    @property
    def stopped(self) -> StopDecision | None:
        """The stop decided at a ``step_end()`` (``None``: none)."""
        return self.run_state.stopped

    @property
    def loop_state(self) -> dict[str, Any]:
        """The loop's own values, saved with every checkpoint and restored by ``resume()``.

        A plain dict the loop reads and writes (``ckpt.loop_state["best_val_loss"] = loss``):
        str keys, values that ``torch.load(weights_only=True)`` reads back (numbers, strings,
        lists, dicts, tensors such as a prefetched batch; a save refuses anything else, naming
        its key path). Saved from rank 0 (deep-copied at the save) in ``trainer.pt``;
        ``resume()`` replaces its contents with the saved ones in place.
        """
        return self.run_state.tracked.loop_state

    @loop_state.setter
    def loop_state(self, value: dict[str, Any]) -> None:
        if type(value) is not dict:
            raise TrackingError(
                f"Checkpointer.loop_state must be a dict; got {type(value).__name__}; assign a "
                "plain dict, or set keys on the existing one"
            )
        self.run_state.tracked.loop_state = value
