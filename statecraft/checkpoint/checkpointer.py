"""``Checkpointer``: the one object a training loop talks to.

::

    cfg = sc.CheckpointConfig.load("ckpt.yaml", overrides=["save_every=100"])
    ckpt = sc.Checkpointer(cfg, run=sc.RunIdentity("proj", "group", "name"), output_root=out)
    ckpt.track(model=model, optimizer=opt, scheduler=sched, data=sampler)
    start = ckpt.resume()                  # ResumeResult: step, source, reason (logged)
    for step in range(start.step, max_steps):
        train_step()
        ckpt.record(sc.Outcome.APPLIED)    # or SKIPPED / ACCUMULATING: advances the clocks
        if ckpt.step_end():                # StepEnd: saves when due; true means stop now
            break
    ckpt.finalize()                        # the normal-final save

``run`` may also be one name (``run="mlp"`` is ``RunIdentity.named("mlp")``).
``resume()`` is called once, before the first save; a save by a process that did not resume
into an attempt holding checkpoints is refused, and a resume completes a lagging latest pointer
(:mod:`statecraft.checkpoint.lifecycle`).

Every save and resume runs the transaction tables in ``machines/`` (``save``, ``resume``);
the loop never sees them. Under ``torch.distributed`` every rank calls every method in the
same order; rank 0 resolves the attempt and writes the consolidated files (the whole ``save``
run is rank 0's, its outcome broadcast by :func:`~statecraft.parallel.rank0.on_rank_zero`),
every rank contributes its RNG streams; on resume the coordinator effects run on rank 0
(:func:`~statecraft.parallel.coordinated.rank_zero_effects`) and every rank loads.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statecraft.checkpoint.attempt_open import checked_output_root, open_attempt, release_at_exit
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.layout import RunAttempt, RunIdentity, as_run_identity
from statecraft.checkpoint.lease import WriterLease
from statecraft.checkpoint.lifecycle import Lifecycle, complete_adopted_attempt
from statecraft.checkpoint.machines import load_machine
from statecraft.checkpoint.saving import SaveReport, gather_into, save_full_checkpoint
from statecraft.checkpoint.state import (
    Outcome,
    SchedulerIdentity,
    gather_data_state,
    gather_rng_inventory,
)
from statecraft.checkpoint.step import StepEnd
from statecraft.checkpoint.tracking import require_stateful, stateful_objects
from statecraft.checkpoint.transactions.resume import ResumeContext, ResumeResult, Tracked
from statecraft.engine import RunResult
from statecraft.errors import CheckpointError, ConfigError, ConfigIssue, TrackingError
from statecraft.logs import configure_default_output
from statecraft.parallel.collectives import Collective, default_collective
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem

__all__ = ["Checkpointer", "SaveReport"]

log = logging.getLogger("statecraft")


class Checkpointer:
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
            them, ``None`` (default) follows the ``quiet`` knob. Only applies when the script
            configured no logging itself (:mod:`statecraft.logs`).

    Raises:
        NotSupportedYetError: a knob asks for a feature this release does not build.
        TrackingError: ``config`` is not a ``CheckpointConfig``.
        ConfigError: ``output_root`` is not a ``str`` / ``os.PathLike`` path (``bytes``
            included), or is empty or holds a NUL byte; ``run`` is neither a
            ``RunIdentity`` nor a plain run name.
        WriterLeaseError: (at the first ``resume`` / ``save``) another live process writes
            this attempt; and at a save whose lease was taken over since.
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
    ) -> None:
        if not isinstance(config, CheckpointConfig):
            raise TrackingError(f"config must be a CheckpointConfig, got {type(config).__name__}")
        if quiet is not None and not isinstance(quiet, bool):
            raise ConfigError(
                [ConfigIssue("quiet", quiet, "True, False or None (None: the quiet knob)")],
                source="Checkpointer(quiet=...)",
            )
        collective = collective or default_collective()
        # First, so the config's own warnings below reach the user too (statecraft.logs).
        configure_default_output(
            rank=collective.rank, quiet=config.quiet if quiet is None else quiet
        )
        for warning in config.require_supported():
            log.warning(warning)
        root = checked_output_root(output_root)
        identity = as_run_identity(run)
        self.config = config
        self.run = identity
        self.output_root = root
        self.collective = collective
        self.filesystem = filesystem
        self.tracked = Tracked()
        self.attempt: RunAttempt | None = None
        self.store: Store | None = None
        self.lease: WriterLease | None = None  # rank 0's writer lease on the attempt
        self.saves: list[SaveReport] = []
        self.last_saved_step: int | None = None
        self.last_resume_run: RunResult | None = None  # the resume machine's run and trace
        self._exit_release: Callable[[], None] | None = None  # the lease's release at exit
        self._lifecycle = Lifecycle()  # resume once, before saving (lifecycle.py)
        self._resume_machine = load_machine("resume")
        self._save = load_machine("save")

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
    ) -> None:
        """Register the objects whose state makes an exact-resume checkpoint.

        Args:
            model, optimizer: required; saved in ``model.pt`` / ``optim.pt``.
            scheduler: its state is saved in ``trainer.pt``.
            data: this rank's data source; every rank's state is saved in ``data.pt`` and
                each rank restores its own.
            scheduler_identity: the schedule's construction identity (checked on resume).
            stateful: further objects by name (``{"scaler": grad_scaler}``), each with
                ``state_dict`` / ``load_state_dict``; rank 0's state is saved in ``trainer.pt``
                and restored with the rest, all or nothing. A resume refuses a checkpoint that
                saved another set of names.

        Raises:
            TrackingError: an object lacks ``state_dict`` / ``load_state_dict``, or a
                stateful name is not a plain identifier or clashes with a built-in one.
        """
        for name, obj in (("model", model), ("optimizer", optimizer)):
            require_stateful(name, obj)
        for name, obj in (("scheduler", scheduler), ("data", data)):
            if obj is not None:
                require_stateful(name, obj)
        if scheduler_identity is not None and not isinstance(scheduler_identity, SchedulerIdentity):
            raise TrackingError("scheduler_identity must be a SchedulerIdentity")
        named = stateful_objects(stateful)
        self.tracked.model = model
        self.tracked.optimizer = optimizer
        self.tracked.scheduler = scheduler
        self.tracked.data = data
        self.tracked.scheduler_identity = scheduler_identity
        self.tracked.stateful = named

    @property
    def loop_state(self) -> dict[str, Any]:
        """The loop's own values, saved with every checkpoint and restored by ``resume()``.

        A plain dict the loop reads and writes (``ckpt.loop_state["best_val_loss"] = loss``):
        str keys, values that ``torch.load(weights_only=True)`` reads back (numbers, strings,
        lists, dicts, tensors such as a prefetched batch; a save refuses anything else, naming
        its key path). Saved from rank 0 (deep-copied at the save) in ``trainer.pt``;
        ``resume()`` replaces its contents with the saved ones in place.
        """
        return self.tracked.loop_state

    @loop_state.setter
    def loop_state(self, value: dict[str, Any]) -> None:
        if type(value) is not dict:
            raise TrackingError(
                f"Checkpointer.loop_state must be a dict; got {type(value).__name__}; assign a "
                "plain dict, or set keys on the existing one"
            )
        self.tracked.loop_state = value

    def _require_tracked(self, action: str) -> None:
        if self.tracked.model is None or self.tracked.optimizer is None:
            raise TrackingError(
                f"cannot {action}: call Checkpointer.track(model=..., optimizer=...) first"
            )

    def close(self) -> None:
        """Release the writer lease (remove its record, drop the lock) so another process may
        write this attempt; the checkpointer must not save or resume afterwards. Safe to call
        twice; a process that exits releases the lock anyway."""
        lease, self.lease = self.lease, None
        self._closed = True
        if self._exit_release is not None:
            atexit.unregister(self._exit_release)
        if lease is not None:
            lease.release()

    def _ensure_attempt(self) -> Store:
        if getattr(self, "_closed", False):
            raise TrackingError(
                "this Checkpointer was closed (its writer lease released); create a new one"
            )
        if self.store is None:
            self.attempt, self.store, self.lease = open_attempt(
                self.config,
                self.run,
                self.output_root,
                collective=self.collective,
                filesystem=self.filesystem,
            )
            self._exit_release = release_at_exit(self.lease, self.filesystem)
        return self.store

    @property
    def clocks(self):
        return self.tracked.clocks

    @property
    def step(self) -> int:
        """Applied optimizer updates so far (the checkpoint iteration axis)."""
        return self.tracked.clocks.optimizer_step

    # ----------------------------------------------------------------- resume
    def resume(self) -> ResumeResult:
        """Decide where training starts and load it (see ``machines/resume.toml``).

        Call it once, before the training loop and before any save. When ``resume=auto``
        adopts a committed iteration newer than ``latest_checkpoint.txt`` names (a kill
        between a save's commit and its pointer update), the pointer is completed through the
        save machine's reconcile path before this returns, and temporaries of dead writers in
        the attempt are removed (this process holds the writer lease).

        Returns:
            the :class:`ResumeResult`; ``step`` is where the loop continues.

        Raises:
            ResumeError: ``resume()`` was already called, or this process already saved (its
                state would be replaced mid-run); or (with CheckpointCorruptError /
                TrainerStateError) an explicit checkpoint is missing or does not verify, or a
                chosen one cannot be loaded exactly.
            WriterLeaseError / StoreError: completing the latest pointer failed (the tracked
                objects hold the checkpoint's state; ``latest`` is as it was).
        """
        self._require_tracked("resume")
        self._lifecycle.before_resume(
            self.attempt.run_dir if self.attempt else self.run.job_dir(Path(self.output_root))
        )
        mode = self.config.resume
        kind = mode if mode in ("auto", "off") else "explicit"
        # An explicit source is verified and loaded before a new attempt is minted for the
        # run's own saves: a bad path must not leave an empty attempt that resume=auto would
        # adopt next time (shadowing the older attempt's checkpoints).
        store = self._ensure_attempt() if kind != "explicit" else None
        attempt = self.attempt
        ctx = ResumeContext(
            mode=kind,
            tracked=self.tracked,
            store=None if attempt is None or attempt.minted else store,
            explicit=mode if kind == "explicit" else None,
            verify_level=self.config.verify,
            cursor_resume=self.config.data.cursor_resume,
            collective=self.collective,
            filesystem=self.filesystem,
        )
        machine = self._resume_machine
        self.last_resume_run = machine.run(
            ctx, call=rank_zero_effects(self.collective, machine.bindings.roles)
        ).raise_for_failure()
        if kind == "explicit":
            self._ensure_attempt()
        result = ctx.result
        if result is None:  # pragma: no cover - every terminal path sets it
            raise CheckpointError("resume machine ended without a result")
        if ctx.store is not None:  # an adopted attempt: complete its pointer, sweep leftovers
            complete_adopted_attempt(
                self.collective, ctx.store, result, machine=self._save, lease=self.lease
            )
        self.last_saved_step = result.step if result.resumed else None
        self._lifecycle.after_resume(result, self.attempt)
        return result

    # ------------------------------------------------------------------ steps
    def record(self, outcome: Outcome) -> None:
        """Advance the update clocks by one microbatch outcome."""
        self.tracked.clocks.record(outcome)

    def step_end(self) -> StepEnd:
        """Call at every step boundary. Saves when ``save_every`` is due at a quiescent
        boundary.

        Returns:
            a :class:`StepEnd`: ``saved`` is the save's report (rank 0) or ``None``; ``stop``
            (also its truth value) says the loop must stop now, with ``reason`` (termination
            handling arrives with emergency saves; this release never stops).

        Raises:
            ResumeRequiredError: a save was due in an attempt holding committed checkpoints
                and this process did not call ``resume()``; nothing was written.
            (and what :meth:`save` raises)
        """
        every = self.config.save_every
        clocks = self.tracked.clocks
        saved = None
        if (
            every > 0
            and clocks.quiescent
            and clocks.optimizer_step > 0
            and clocks.optimizer_step % every == 0
            and clocks.optimizer_step != self.last_saved_step
        ):
            saved = self.save()
        return StepEnd(saved=saved, stop=False, reason=None)

    def finalize(self) -> SaveReport | None:
        """Normal completion: save the final step even off cadence (unless ``save_every=0``
        or it is already saved).

        Returns:
            the final save's report (rank 0), or ``None`` when nothing was saved.

        Raises:
            ResumeRequiredError: as :meth:`save`.
        """
        if self.config.save_every > 0 and self.step != self.last_saved_step and self.step > 0:
            return self.save()
        return None

    # ------------------------------------------------------------------- save
    def save(self) -> SaveReport | None:
        """Write a full checkpoint of the current step (see ``machines/save.toml``).

        Returns:
            the report on rank 0; ``None`` on other ranks.

        Raises:
            ResumeRequiredError: the attempt already holds committed checkpoints and this
                process did not call ``resume()``, or started fresh in it (nothing is written;
                call ``resume()`` before the loop, or set ``resume=off`` for a new attempt).
            TrainerStateError: the accumulation window is open.
            StoreError / PlanDriftError / CheckpointCorruptError: the save failed; the previous
                checkpoint is intact and ``latest`` still names it.
        """
        self._require_tracked("save")
        store = self._ensure_attempt()
        self._lifecycle.before_save(self.collective, self.attempt, store)
        clocks = self.tracked.clocks
        clocks.require_quiescent("save a checkpoint")
        rng = gather_rng_inventory(
            rank=self.collective.rank,
            world_size=self.collective.world_size,
            all_gather_object=None
            if self.collective.world_size == 1
            else gather_into(self.collective),
        )
        source = self.tracked.data
        data = None if source is None else gather_data_state(source, collective=self.collective)
        report: list[SaveReport] = []  # filled on rank 0 only; only ok/error is broadcast
        where = str(self.attempt.checkpoints_dir) if self.attempt else store.describe()

        def save_here() -> None:
            report.append(
                save_full_checkpoint(
                    self.tracked,
                    store,
                    rng=rng,
                    data=data,
                    step=self.step,
                    lease=self.lease,
                    machine=self._save,
                    location=where,
                )
            )
            self.saves.append(report[-1])

        on_rank_zero(self.collective, save_here)
        self.last_saved_step = self._lifecycle.saved = self.step
        return report[0] if report else None
