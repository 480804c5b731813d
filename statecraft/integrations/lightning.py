"""A crash-consistent Lightning ``CheckpointIO``: ``Trainer(plugins=[StatecraftCheckpointIO()])``.

Each path Lightning saves to (``epoch=0-step=10.ckpt``, ``last.ckpt``, ``hpc_ckpt_1.ckpt``)
has a slot of generations in ``.statecraft/`` beside it
(:mod:`statecraft.integrations.lightning_slots`): a save writes the checkpoint dict as
``checkpoint.pt`` of a new generation (durable, digested, commit manifest last, directory
fsynced), then makes the path itself a link to that committed file
(:mod:`statecraft.integrations.lightning_links`), and only then retires the older generations
of that slot. So ``last.ckpt``, rewritten at every save, always names a committed generation,
and ``torch.load(path)`` / ``load_from_checkpoint(path)`` open it as Lightning users expect. A load
takes the newest generation that verifies (deep: every digest), logging each newer one it
passed over; a remove invalidates before it deletes. The ``ModelCheckpoint`` monitor's score
of a top-k checkpoint is recorded in its commit manifest, so
``statecraft.checkpoints(dirpath).best(monitor, mode).path`` is ``best_model_path``.

Call order (Lightning's strategy drives it, rank 0 only):

1. ``save_checkpoint(checkpoint, path)`` -- per ``ModelCheckpoint`` save and per
   ``trainer.save_checkpoint`` (the SLURM SIGUSR1 handler's ``hpc_ckpt_N.ckpt`` too);
2. ``remove_checkpoint(path)`` -- top-k pruning, the previous ``last.ckpt`` of a versioned name;
3. ``load_checkpoint(path)`` -- ``fit(ckpt_path=...)``, ``test(ckpt_path="best")``;
4. ``teardown()`` -- end of ``fit``/``test``: joins the write in flight; the IO stays usable.

With ``async_save=True`` the training thread blocks only for the join of the previous write
and a CPU copy of the checkpoint's tensors (:class:`~statecraft.checkpoint.async_writes.staging.
StagingBuffers`); ``torch.save`` and the commit run on statecraft's write slot. A write's
error is raised by the next save, remove, load or teardown, never lost. A remove asked for
while a write is in flight is done after that write committed (at the next join), so top-k
pruning never deletes the previous checkpoint before the new one is durable.

Signals: this plugin installs no signal handler. Under SLURM Lightning's signal connector owns
the requeue signal (SIGUSR1 by default: it saves ``hpc_ckpt_N.ckpt`` through this plugin and
runs ``scontrol requeue``) and SIGTERM; do not also install statecraft's
``TerminationWatch`` in a Lightning process.

Works with either distribution: ``import lightning.pytorch as L`` (``pip install lightning``)
or ``import pytorch_lightning as pl`` (``pip install pytorch-lightning``); with both installed
the class is an instance of both ``CheckpointIO`` classes (the other registered as an ABC), so
either ``Trainer`` accepts it. Requires ``pip install 'statecraft[lightning]'``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import torch

from statecraft.checkpoint.async_writes.staging import (
    SnapshotUnsupported,
    StagingBuffers,
    isolation_problem,
)
from statecraft.checkpoint.async_writes.write_slot import PendingSave, WriteSlot
from statecraft.checkpoint.units import UnitReport
from statecraft.errors import UnitError, UnitNotCommittedError
from statecraft.integrations.lightning_bases import CheckpointIO, register_everywhere
from statecraft.integrations.lightning_links import remove_path, write_generation
from statecraft.integrations.lightning_slots import (
    CHECKPOINT_FILE,
    SLOTS_DIR,
    SlotAddress,
    automatic_fallback,
    committed_checkpoint_file,
    last_committed_checkpoint,
    monitor_meta,
    newest_slot_generation,
    published_unit,
    slot_address,
)

__all__ = [
    "CHECKPOINT_FILE",
    "SLOTS_DIR",
    "StatecraftCheckpointIO",
    "committed_checkpoint_file",
    "last_committed_checkpoint",
]

log = logging.getLogger("statecraft.lightning")

_ROLE = "lightning"


def _cpu_storage(storage: Any, _location: Any) -> Any:
    """``TorchCheckpointIO``'s default ``map_location``: every storage stays on the CPU."""
    return storage


def _torch_payload(obj: Any) -> Callable[[BinaryIO], None]:
    def write(writer: BinaryIO) -> None:
        torch.save(obj, writer)

    return write


def _step_meta(checkpoint: dict[str, Any], address: SlotAddress) -> tuple[int | None, dict]:
    step = checkpoint.get("global_step")
    epoch = checkpoint.get("epoch")
    meta: dict[str, Any] = {"lightning_path": address.slot}
    if isinstance(epoch, int):
        meta["epoch"] = epoch
    if isinstance(step, int):
        meta["global_step"] = step
    version = checkpoint.get("pytorch-lightning_version")
    if isinstance(version, str):
        meta["lightning_version"] = version
    meta.update(monitor_meta(checkpoint, address.path))  # statecraft.checkpoints' metric
    return (step if isinstance(step, int) else None), meta


class StatecraftCheckpointIO(CheckpointIO):
    """Lightning ``CheckpointIO`` writing every checkpoint as a committed statecraft unit.

    Args:
        async_save: write in the background (see the module doc); the training thread pays
            the join of the previous write and a CPU copy of the tensors.
        allow_unverified: let :meth:`load_checkpoint` load a plain checkpoint file (one
            ``TorchCheckpointIO`` wrote, with no commit manifest) with a WARNING instead of
            refusing it. Off by default: such a file may be the torn product of a killed or
            power-lost save.

    Example::

        trainer = Trainer(
            plugins=[StatecraftCheckpointIO(async_save=True)],
            callbacks=[ModelCheckpoint(dirpath="ckpts", save_last=True)],
        )
        trainer.fit(model, ckpt_path="last")

    Do not wrap it in Lightning's ``AsyncCheckpointIO``: that runs ``save_checkpoint`` on a
    thread pool without copying the tensors, so training may change them mid-write; use
    ``async_save=True`` instead.
    """

    def __init__(self, *, async_save: bool = False, allow_unverified: bool = False) -> None:
        self.async_save = async_save
        self.allow_unverified = allow_unverified
        self._slot = WriteSlot(_ROLE)
        self._staging = StagingBuffers()
        self._deferred_removals: list[str] = []
        self._saving = False  # a save in progress on the training thread (re-entry guard)
        self.last_report: UnitReport | None = None
        """The report of the newest save that committed (sync: after each save; async: after
        the join that collected it)."""
        self.last_blocking_seconds: float | None = None
        """Training-thread seconds of the newest :meth:`save_checkpoint` call."""
        self.last_join_seconds: float | None = None
        """Of :attr:`last_blocking_seconds`, the seconds spent waiting for the previous
        background write (async; 0 when it had finished)."""
        self.last_write_seconds: float | None = None
        """Seconds the newest collected write took to commit (sync: the whole save; async:
        from the hand-off to the background slot, set when the write is joined by the next
        save, remove, load or teardown)."""

    def __repr__(self) -> str:
        return (
            f"StatecraftCheckpointIO(async_save={self.async_save}, "
            f"allow_unverified={self.allow_unverified}, {self._slot!r})"
        )

    # ------------------------------------------------------------------ join
    def _join(self) -> None:
        """Join the write in flight (raising its error), then run the removals deferred
        behind it. A failed write drops them: the checkpoints they name stay on disk."""
        try:
            pending = self._slot.join()
        except BaseException:
            if self._deferred_removals:
                log.warning(
                    "not removing %s: the write they were deferred behind failed, so they "
                    "may be the newest committed checkpoints",
                    ", ".join(self._deferred_removals),
                )
                self._deferred_removals = []
            raise
        if pending is not None and isinstance(pending.report, UnitReport):
            self.last_report = pending.report
            self.last_write_seconds = pending.finished_seconds
        removals, self._deferred_removals = self._deferred_removals, []
        for path in removals:
            self._remove_now(path)

    # ------------------------------------------------------------------ save
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        """Write ``checkpoint`` as the next generation of slot ``path``; retire the older
        generations once it committed.

        Raises:
            TypeError: ``storage_options`` was given (nothing here uses them).
            UnitError: ``path`` is a URL, or a plain file or symlink already holds ``path``
                (it is left alone: move it away, or save elsewhere).
            BaseException: the previous background write's error (async), raised once.
            StoreError: the write failed; no manifest was created, the older generations
                are intact.
        """
        started = time.perf_counter()
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r} was passed to StatecraftCheckpointIO, "
                "which takes none; call trainer.save_checkpoint(path) without it"
            )
        address = slot_address(path, follow_link=False)
        familiar = address.familiar
        if os.path.lexists(familiar) and not address.legacy and published_unit(familiar) is None:
            raise UnitError(
                f"cannot save a statecraft checkpoint at {familiar}: a "
                f"{'symlink' if os.path.islink(familiar) else 'plain file'} holds that "
                "name (a checkpoint written without statecraft, or a save_last='link' link). "
                "It was left untouched; move it away or save under another name.",
                path=familiar,
                reason="not a statecraft checkpoint",
            )
        step, meta = _step_meta(checkpoint, address)
        if self._saving:
            # re-entered from a signal handler (Lightning's SLURM SIGUSR1 handler saves
            # hpc_ckpt_N.ckpt) while this thread was inside a save: the slot and the staging
            # buffers belong to the interrupted save, so write this one synchronously
            self.last_report = self._write(address, checkpoint, step, meta)
            return
        self._saving = True
        try:
            self._save(checkpoint, address, step, meta, started)
        finally:
            self._saving = False

    def _save(
        self,
        checkpoint: dict[str, Any],
        address: SlotAddress,
        step: int | None,
        meta: dict,
        started: float,
    ) -> None:
        joined = time.perf_counter()
        self._join()
        self.last_join_seconds = time.perf_counter() - joined
        if self.async_save:
            snapshot = self._stage(checkpoint, address)
            if snapshot is not None:
                pending = PendingSave(
                    iteration=max(step or 0, 0), location=address.path, role=_ROLE
                )
                self._slot.submit(pending, self._job(address, snapshot, step, meta))
                self.last_blocking_seconds = pending.blocking_seconds = (
                    time.perf_counter() - started
                )
                return
        self.last_report = self._write(address, checkpoint, step, meta)
        self.last_blocking_seconds = self.last_write_seconds = time.perf_counter() - started

    def _stage(self, checkpoint: dict[str, Any], address: SlotAddress) -> Any | None:
        """A CPU copy of ``checkpoint`` isolated from the live state, or ``None`` (the save
        is then written synchronously, the reason logged at WARNING)."""
        try:
            snapshot = self._staging.snapshot({CHECKPOINT_FILE: checkpoint})
        except SnapshotUnsupported as exc:
            reason = exc.reason
        else:
            problem = isolation_problem(snapshot, {"checkpoint": checkpoint})
            if problem is None:
                return snapshot.payloads[CHECKPOINT_FILE]
            reason = problem
        log.warning("writing %s synchronously: %s", address.path, reason)
        return None

    def _job(
        self, address: SlotAddress, staged: Any, step: int | None, meta: dict
    ) -> Callable[[], UnitReport]:
        def job() -> UnitReport:
            try:
                return self._write(address, staged, step, meta)
            except BaseException as exc:
                exc.add_note(f"while writing the Lightning checkpoint {address.path}")
                raise

        return job

    @staticmethod
    def _write(address: SlotAddress, obj: Any, step: int | None, meta: dict) -> UnitReport:
        report = write_generation(address, _torch_payload(obj), step=step, meta=meta)
        log.debug("committed %s (%d bytes, %.3f s)", report.unit, report.bytes, report.seconds)
        return report

    # ------------------------------------------------------------------ load
    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Load the newest generation of ``path`` that verifies (deep); each newer one passed
        over is logged at WARNING with its reason.

        Args:
            map_location: as ``torch.load``; ``None`` keeps every storage on the CPU, as
                ``TorchCheckpointIO``'s default does.
            weights_only: passed to ``torch.load`` as is.

        A path Lightning chose by itself (``hpc_ckpt_<N>.ckpt`` on a SLURM requeue,
        ``last*.ckpt`` for ``ckpt_path="last"``) that holds no committed checkpoint falls back
        to the newest sibling that verifies, with a WARNING naming both
        (:func:`~statecraft.integrations.lightning_slots.automatic_fallback`); a path the
        user named never does.

        Raises:
            UnitNotCommittedError: (a ``FileNotFoundError``) nothing at ``path``, no
                generation that verifies (and no automatic fallback), or a plain file (unless
                ``allow_unverified``); the message names the path and what was found.
            BaseException: the background write's error (async), raised once.
        """
        self._join()
        location = _cpu_storage if map_location is None else map_location
        address = slot_address(path, follow_link=True)
        if (
            self.allow_unverified
            and os.path.isfile(address.familiar)
            and not os.path.islink(address.familiar)
        ):
            log.warning(
                "loading %s without verification: a plain file with no commit manifest "
                "(allow_unverified=True)",
                address.path,
            )
            with open(address.familiar, "rb") as handle:
                return torch.load(handle, map_location=location, weights_only=weights_only)
        try:
            verdict, _ = newest_slot_generation(address)
        except UnitNotCommittedError as exc:
            fallback = automatic_fallback(address)
            if fallback is None:
                raise
            log.warning(
                "%s holds no committed checkpoint (%s); Lightning chose this path by itself "
                "(SLURM requeue or ckpt_path='last'), so loading %s instead, the newest "
                "checkpoint that verifies",
                address.path, getattr(exc, "reason", exc), fallback,
            )  # fmt: skip
            address = slot_address(fallback, follow_link=True)
            verdict, _ = newest_slot_generation(address)
        with address.store.open_read(f"{verdict.unit}/{CHECKPOINT_FILE}") as handle:
            loaded = torch.load(handle, map_location=location, weights_only=weights_only)
        log.info("loaded %s (%s)", address.store.abspath(verdict.unit), address.path)
        return loaded

    # ---------------------------------------------------------------- remove
    def remove_checkpoint(self, path: Any) -> None:
        """Remove checkpoint ``path``: every generation invalidated (manifest deleted durably)
        before its files are deleted. A symlink is unlinked, never followed. With a write in
        flight the removal waits for that write to commit (it runs at the next join).

        Raises:
            BaseException: a finished background write's error, raised once.
            UnitError: ``path`` is a URL.
        """
        in_flight = self._slot.in_flight
        if in_flight is not None and not in_flight.done:
            self._deferred_removals.append(os.fspath(path))
            return
        self._join()
        self._remove_now(os.fspath(path))

    @staticmethod
    def _remove_now(path: str) -> None:
        remove_path(slot_address(path, follow_link=False))
        log.debug("removed checkpoint %s", path)

    # -------------------------------------------------------------- teardown
    def teardown(self) -> None:
        """Join the write in flight (its error is raised here) and run deferred removals.
        The plugin stays usable (``trainer.test`` after ``fit`` saves and loads again)."""
        self._join()


register_everywhere(StatecraftCheckpointIO)  # the other distribution's Trainer accepts it too
