"""``Checkpointer``: the one object a training loop talks to.

::

    cfg = sc.CheckpointConfig.load("ckpt.yaml", overrides=["save_every=100"])
    ckpt = sc.Checkpointer(cfg, run=sc.RunIdentity("proj", "group", "name"), output_root=out)
    ckpt.track(model=model, optimizer=opt, scheduler=sched, data=sampler)
    ckpt.validate_with(evaluate, source="heldout")   # optional: evaluate(step) -> metrics
    start = ckpt.resume()                  # ResumeResult: step, source, reason (logged)
    for step in range(start.step, max_steps):
        train_step()
        ckpt.record(sc.Outcome.APPLIED)    # or SKIPPED / ACCUMULATING: advances the clocks
        if ckpt.step_end():                # StepEnd: saves / validates when due; true: stop
            break                          # (a termination: the emergency save is durable)
    ckpt.finalize()                        # the normal-final save and validation; joins

With ``save_async=true`` (the default) a full save returns a ``PendingSave`` once the state is
staged; the write job (the save, then retention) runs in the background, and every later
write, ``wait()``, ``finalize()`` and ``close()`` joins it first, raising its error
(:mod:`statecraft.checkpoint.async_writes.role_slots`).

``run`` may also be one name (``RunIdentity.named``). ``resume()`` is called once, before the
first save (:mod:`statecraft.checkpoint.facade.lifecycle`). Every save, validation and resume runs
the tables in ``machines/`` (:mod:`statecraft.checkpoint.facade.boundary_run`). Under
``torch.distributed`` every rank calls every method in the same order; rank 0 resolves the
attempt, writes and evaluates (its outcome broadcast by
:func:`~statecraft.parallel.rank0.on_rank_zero`); every rank loads on resume.

A termination (signal, sentinel file, deadline: ``termination.*``) is decided at a
``step_end()`` on every rank alike; its emergency save replaces the due boundary and
``DONE.json`` records the reason (:mod:`statecraft.checkpoint.facade.stopping`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from statecraft.checkpoint.artifacts.saving import ArtifactReport
from statecraft.checkpoint.async_writes.write_slot import PendingSave
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.facade import roles as several
from statecraft.checkpoint.facade.boundary import decide_boundary
from statecraft.checkpoint.facade.boundary_run import BoundaryRunner
from statecraft.checkpoint.facade.boundary_step import check_epoch, due_boundary, execute
from statecraft.checkpoint.facade.checkpointer_views import CheckpointerViews
from statecraft.checkpoint.facade.construction import close_run, start_run
from statecraft.checkpoint.facade.resume_run import run_resume
from statecraft.checkpoint.facade.step import StepEnd
from statecraft.checkpoint.facade.step_saver import StepSaver
from statecraft.checkpoint.facade.stopping import finalize_run, poll_stop, refuse_after_stop
from statecraft.checkpoint.facade.tracking import (
    record_outcome,
    refresh_copies,
    register,
    register_copies,
)
from statecraft.checkpoint.facade.validation_resume import register_evaluation
from statecraft.checkpoint.kernel.evaluation import Evaluator
from statecraft.checkpoint.kernel.layout import RunIdentity
from statecraft.checkpoint.resume.bindings import ResumeResult
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.save.saving import SaveReport
from statecraft.checkpoint.state import Outcome, SchedulerIdentity
from statecraft.checkpoint.triggers import SaveTrigger
from statecraft.parallel.collectives import Collective
from statecraft.storage.filesystem import Filesystem

__all__ = ["Checkpointer", "SaveReport"]


class Checkpointer(CheckpointerViews, several.RoleMethods):
    """Crash-consistent save and exact resume for one training run.

    Args:
        config: the checkpoint knobs (``CheckpointConfig``).
        run: the job's identity (``<project>/<group>/<name>``): a :class:`RunIdentity`, or one
            run name as a ``str`` (``RunIdentity.named``: project and group ``"default"``).
        output_root: the directory all runs live under.
        collective: rank coordination (default: ``torch.distributed`` if initialised).
        filesystem: what the local store acts through (default: the real OS). Tests pass an
            ``OsFilesystem(gate=...)`` to inject faults (a full disk) into the real code path.
        quiet: ``True`` silences the default ``statecraft:`` lines on stderr, ``False`` shows
            them, ``None`` follows the ``quiet`` knob (only without the script's own logging).
        retention: a :class:`RetentionPlan` of policy objects (best-N by a metric, every-N
            steps, any-of, ``keep_fn``, ``require_uploaded``); it replaces the
            ``keep_optim_last`` / ``keep_model_last`` knobs, so giving it with either knob set
            is refused. ``None``: the plan of the knobs (``RetentionPlan.from_config``).
        save_triggers: saves beyond ``save_every``: an :class:`EveryNSeconds` (wall clock),
            :class:`EveryNEpochs` (with ``step_end(epoch=...)``), :class:`SaveFn`
            (``should_save(step) -> bool``), or a list of them (any due: a save). Decided on
            rank 0 and broadcast, so every rank saves at the same step; a stop's emergency
            save replaces them as it replaces ``save_every``.

    Raises:
        NotSupportedYetError: a knob asks for a feature this release does not build.
        TrackingError: ``config`` is not a ``CheckpointConfig``.
        ConfigError: ``output_root`` is not a ``str`` / ``os.PathLike`` path (not ``bytes``),
            or empty, or holds a NUL; ``run`` is neither a ``RunIdentity`` nor a run name;
            ``save_triggers`` holds something that is not a save trigger;
            ``retention`` is not a ``RetentionPlan``, or comes with a ``keep_optim_last`` /
            ``keep_model_last`` knob set (the error names both); ``termination.deadline="slurm"``
            without a parsable ``$SLURM_JOB_END_TIME``.
        WriterLeaseError: (at the first ``resume`` / ``save``) another live process writes
            this attempt; and at a save whose lease was taken over since.

    Inside the package, the run is two records the facade's helpers take instead of the
    ``Checkpointer``: ``run_context`` (frozen: the knobs, identity, ranks, retention plan,
    termination watch and tables; :mod:`~statecraft.checkpoint.facade.run_context`) and
    ``run_state`` (what changes: tracked objects, background writes, the open attempt, the
    resume status, the reports; :mod:`~statecraft.checkpoint.facade.run_state`). Its
    attributes (``config``, ``saves``, ...) read them (``facade/checkpointer_views.py``).
    """

    def __init__(
        self,
        config: CheckpointConfig,
        *,
        run: RunIdentity | str,
        output_root: str | os.PathLike[str],
        collective: Collective | None = None,
        filesystem: Filesystem | None = None,
        quiet: bool | None = None,
        retention: RetentionPlan | None = None,
        save_triggers: SaveTrigger | Sequence[SaveTrigger] | None = None,
    ) -> None:
        self.run_context, self.run_state = start_run(
            config,
            run=run,
            output_root=output_root,
            collective=collective,
            filesystem=filesystem,
            quiet=quiet,
            retention=retention,
            save_triggers=save_triggers,
        )
        self._runner = BoundaryRunner(
            self.run_context, self.run_state, StepSaver(self.run_context, self.run_state)
        )

    def __repr__(self) -> str:
        where = self.attempt.run_dir if self.attempt else None
        return f"Checkpointer(run={self.run}, attempt={where})"

    # ------------------------------------------------------------------ setup
    def track(
        self,
        *,
        model: Any,
        optimizer: Any,
        scheduler: Any = None,
        data: Any = None,
        scheduler_identity: SchedulerIdentity | None = None,
        stateful: dict[str, Any] | None = None,
        reference: Any = None,
        reference_update_every: int = 0,
        data_identity: Any = None,
        reference_refresh: Any = None,
        old: Any = None,
        old_update_every: int = 0,
        old_refresh: Any = None,
        ema: Any = None,
        ema_updates: bool = True,
    ) -> None:
        """Register the objects whose state makes an exact-resume checkpoint.

        Args:
            model, optimizer: required; saved in ``model.pt`` / ``optim.pt``.
            scheduler: its state is saved in ``trainer.pt``.
            data: this rank's data source (a ``StatefulDataLoader`` resumes at the exact next
                batch; a plain ``DataLoader`` has no cursor), saved per rank in ``data.pt`` with
                its identity, checked under ``data.cursor_resume`` (docs: "Data").
            data_identity: a ``DataIdentity``: what cannot be read from ``data``
                (``grad_accum``; or overrides of ``batch_size``, ``seed``, ``sharding``).
            scheduler_identity: the schedule's construction identity (checked on resume).
            stateful: further objects by name (``{"scaler": grad_scaler}``), each with
                ``state_dict`` / ``load_state_dict``; rank 0's state is saved in ``trainer.pt``
                and restored with the rest, all or nothing. A resume refuses a checkpoint that
                saved another set of names.
            reference, reference_update_every, reference_refresh: a frozen reference (``0``;
                never saved: build it before ``resume()``, which loads ``init_from`` into it on
                every start) or a moving one (``N > 0``: ``ref.pt``, refreshed with
                ``reference_refresh(model, reference)`` after every N-th applied update).
            old, old_update_every, old_refresh: a moving old policy (``old.pt``, or derived
                from the policy at a refresh-aligned checkpoint).
            ema: an ``AveragedModel`` of the model, advanced by ``record(APPLIED)`` and saved in
                ``model.pt``; ``ema_updates=False``: not maintained, not saved (a warning).
                docs/checkpointing.md: "Reference policy", "Old policy", "EMA".

        Raises:
            TrackingError: an object lacks ``state_dict`` / ``load_state_dict``, or a
                stateful name is not a plain identifier or clashes with a built-in one.
        """
        several.refuse_mixed(self.run_state)  # several roles: track_role (facade/roles.py)
        register(
            self.run_state.tracked,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            data=data,
            scheduler_identity=scheduler_identity,
            stateful=stateful,
            data_identity=data_identity,
        )
        register_copies(self.run_context, self.run_state, reference=reference,
                        reference_update_every=reference_update_every,
                        reference_refresh=reference_refresh, old=old,
                        old_update_every=old_update_every, old_refresh=old_refresh,
                        ema=ema, ema_updates=ema_updates)  # fmt: skip

    def validate_with(self, evaluate: Evaluator, *, source: str | None = None) -> None:
        """Register the loop's evaluation: ``evaluate(step) -> {name: number}`` (raising is a
        failed evaluation). It runs on rank 0 at every ``validation.every`` step and the final
        step (see docs/checkpointing.md, "Validation"); ``source`` names the held-out data
        (default: the callable's qualified name) and is part of the validation identity
        recorded in every ``trainer.pt``.

        Raises:
            TrackingError: called after ``resume()`` (the identity was already checked), or
                ``evaluate`` is not callable, or ``source`` is not a non-empty str.
        """
        register_evaluation(self.config, self.run_state, evaluate, source=source)

    def wait(self) -> list[SaveReport]:
        """Join every role's background write (every rank calls it): the checkpoints saved
        so far are durable when it returns.

        Returns:
            the reports of the saves joined now (rank 0; also appended to ``saves``).

        Raises:
            Exception: a background write's error (its own class, with a note naming the
                iteration), once, on every rank; the previous checkpoint is intact and
                ``latest`` names it.
        """
        several.join_roles(self.run_state)  # a multi-role loop's boundary (facade/roles.py)
        saves = self.run_state.saves
        before = len(saves)
        self.run_state.writes.join(saves)
        return saves[before:]

    def close(self) -> None:
        """Join the background writes, then release the writer lease so another process may
        write this attempt, and restore the signal handlers ``resume()`` replaced; no save or
        resume afterwards. Safe to call twice; an exiting process releases the lock anyway.

        Raises:
            Exception: a background write's error (the lease is released all the same).
        """
        try:
            several.close_roles(self.run_state)
        finally:
            close_run(self.run_context, self.run_state)

    # ----------------------------------------------------------------- resume
    def resume(self) -> ResumeResult:
        """Decide where training starts and load it (``machines/resume.toml``). Call it once,
        after ``track`` / ``validate_with``, before the loop and any save. It completes a
        lagging latest pointer, removes dead writers' temporaries, finishes the pending stage
        of an adopted checkpoint whose validation is pending (the evaluation only if it had
        not succeeded), and on a fresh start runs the ``validation.before_training`` pass.
        It installs the termination signal handlers (main thread only; ``close()`` restores
        the previous ones) and logs how the previous window ended (``DONE.json``).

        Raises:
            ResumeError: a second ``resume()``, or one after a save; (with
                CheckpointCorruptError / TrainerStateError / ArtifactResumeError) an explicit
                checkpoint is missing, does not verify or is an artifact, or the attempt holds
                artifacts newer than any resumable checkpoint. Nothing was loaded.
            ValidationIdentityError: saved under another validation setup (nothing loaded).
            ValidationFailedError: the pending (or before-training) evaluation failed; the
                checkpoint stays evaluation-pending.
            WriterLeaseError / StoreError: completing the latest pointer failed.
        """
        if self.run_state.roles is not None:  # several roles (facade/roles.py)
            return several.resume_roles(self.run_context, self.run_state)
        self.run_state.require_tracked("resume")
        if self.config.checkpoint_store.backend == "object_store":
            # the direct object-store primary resumes through its root (imported on use)
            from statecraft.checkpoint.facade.direct_resume_run import (
                run_direct_resume_in_attempt,
            )

            return run_direct_resume_in_attempt(self.run_context, self.run_state)
        return run_resume(self.run_context, self.run_state, self._runner)

    # ------------------------------------------------------------------ steps
    def record(self, outcome: Outcome) -> None:
        """Advance the update clocks by one microbatch outcome (``APPLIED``: and the EMA)."""
        several.refuse_single_model_call(self.run_state, "record()")
        record_outcome(self.run_state, outcome)

    def step_end(self, *, epoch: int | None = None, iteration: int | None = None,
                 loop_state: Mapping[str, Any] | None = None) -> StepEnd:  # fmt: skip
        """Call at every step boundary: runs what is due at a quiescent boundary (a
        ``save_every`` save, a ``validation.every`` validation, or their union as one save;
        :func:`~statecraft.checkpoint.facade.boundary.decide_boundary`). First it asks the
        termination watch (one collective): on a stop the synchronous emergency save
        replaces what was due (a due validation: a full evaluation-pending checkpoint, no
        evaluation), then ``DONE.json`` (:mod:`statecraft.checkpoint.facade.emergency_step`).
        Without a stop, the save triggers (``save_triggers``) are asked on rank 0 (one
        broadcast) at a boundary that could save and ``save_every`` does not already save.

        Args:
            epoch: at an epoch's last step, the epochs completed so far (``1`` after the
                first; the same on every rank; :class:`EveryNEpochs`), else ``None``.
            iteration / loop_state: a multi-role loop's (it polls the stop: roles_stop.py).

        Returns:
            a :class:`StepEnd` (``saved`` / ``artifact`` reports on rank 0, ``metrics``,
            ``validated``); true when the loop must stop (``reason``; ``emergency``: what the
            emergency save did): break out of the loop and call ``finalize()``.

        Raises:
            RunStoppedError: the run was stopped at an earlier ``step_end()`` (no write).
            TrackingError: ``epoch`` is not ``None`` or an int >= 1.
            ResumeRequiredError: a save was due in an attempt holding commits and this process
                did not call ``resume()``; nothing was written.
            ValidationFailedError: the evaluation failed (every rank); what was committed
                before it stays committed.
        """
        context, state = self.run_context, self.run_state
        if state.roles is not None or iteration is not None or loop_state is not None:
            return several.step_end_roles(context, state, iteration, loop_state)
        refuse_after_stop(state, "step_end()")
        check_epoch(epoch)
        refresh_copies(state)  # the moving copies due after this applied update, first
        stopped = poll_stop(context, state, self._runner)
        if stopped is not None:
            return stopped
        return execute(
            context,
            state,
            self._runner,
            due_boundary(context, state, final=False, triggers=True, epoch=epoch),
            state.step,
        )

    def finalize(self) -> SaveReport | PendingSave | ArtifactReport | None:
        """Normal completion: the final step's save (even off cadence, unless
        ``save_every=0`` or it is already saved) and its validation (unless already
        validated), through the same decision as :meth:`step_end` (``final=True``); then it
        joins every role's background write, the final save's included, so every checkpoint
        is durable when it returns, and writes ``DONE.json`` (``preempted: null``). The whole
        outcome is ``self.final``. After a stop it only joins: no final save, no evaluation,
        ``DONE.json`` is the stop's. Either way it restores the signal handlers ``resume()``
        installed (no boundary polls them any more); a signal that arrived after the last
        boundary (no stop was decided) is then sent again to the restored handler, after
        ``DONE.json`` is durable: by default it ends the process.

        Returns:
            the final save's report (rank 0; a checkpoint's or an artifact's; a joined
            ``PendingSave`` for an asynchronous save), after a stop the emergency save's,
            or ``None``.

        Raises:
            ResumeRequiredError / ValidationFailedError: as :meth:`step_end`.
            Exception: a background write's error (raised here at the latest).
        """
        if self.run_state.roles is not None:
            return several.finalize_roles(self.run_context, self.run_state)
        refresh_copies(self.run_state)
        return finalize_run(self.run_context, self.run_state, self._runner)

    # ------------------------------------------------------------------- save
    def save(
        self, *, iteration: int | None = None, loop_state: Mapping[str, Any] | None = None
    ) -> SaveReport | PendingSave | ArtifactReport | Any:
        """Save the current step with the run plan (``checkpoint_components``): a full
        checkpoint (``machines/write_job.toml``: the save, then retention), or a partial
        artifact under ``checkpoint_artifacts/`` (``machines/artifact.toml``, synchronous).
        No evaluation runs. It first joins the previous background write. A multi-role loop
        passes its outer ``iteration`` and ``loop_state`` (``facade/roles.py``).

        Returns:
            on rank 0: the :class:`SaveReport`, or, for an asynchronous save
            (``save_async=true``), a ``PendingSave`` (``staged`` set; ``wait()`` gives the
            report; ``durable`` is set once committed); an artifact's report. ``None`` on
            other ranks.

        Raises:
            RunStoppedError: the run was stopped at a ``step_end()`` (nothing is written).
            ResumeRequiredError: the attempt holds committed checkpoints or artifacts and this
                process did not resume into it (nothing is written).
            TrainerStateError: the accumulation window is open.
            ArtifactCommittedError: a partial plan and the step's artifact is committed.
            StoreError / PlanDriftError / CheckpointCorruptError: the save failed; the previous
                checkpoint is intact and ``latest`` still names it (an asynchronous save's
                error is raised at the next join: the next save, ``wait()``, ``finalize()``).
            RetentionError: the save is committed and durable; retention could not finish.
        """
        context, state = self.run_context, self.run_state
        if state.roles is not None or iteration is not None or loop_state is not None:
            return several.save_roles(context, state, iteration, loop_state)
        refuse_after_stop(state, "save()")
        refresh_copies(state)
        boundary = decide_boundary(context.config, regular_due=True, validation_due=False)
        end = execute(context, state, self._runner, boundary, state.step)
        return end.saved or end.artifact
