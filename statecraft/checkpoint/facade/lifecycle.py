"""The facade's lifecycle rules around resume: who may save, and what a resume completes.

Two rules keep a checkpoint series one trajectory and leave ``latest`` correct:

- **No save without a resume.** A process that did not call ``Checkpointer.resume()`` must not
  save into an attempt that already holds committed checkpoints or committed partial
  artifacts: its live state is not their continuation, and its saves would be skipped as
  retries at the committed iterations and written at the others, mixing two runs.
  :func:`resume_required` builds the refusal (:class:`~statecraft.errors.ResumeRequiredError`);
  :func:`newest_committed` and :func:`newest_committed_artifact` are the checks.
- **A resume completes the pointer.** A kill after a save's manifest commit and before its
  pointer update leaves ``latest_checkpoint.txt`` naming an older iteration (or nothing) and a
  ``.latest_checkpoint.txt.tmp-*`` file behind. When resume adopts a committed iteration newer
  than the pointer names, :func:`roll_pointer_forward` runs the save machine's reconcile path
  for it (``machines/save.toml``: ``manifest_committed`` -> ``reconcile_committed`` ->
  ``advance_latest``), so a run with nothing left to train still exits with ``latest``
  correct; :func:`sweep_dead_writers` removes the temporaries of writers that died (the
  caller holds the attempt's writer lease, which proves no live writer is using them).

Everything here acts through the :class:`~statecraft.storage.base.Store` and runs on rank 0
(the facade calls it through :func:`~statecraft.parallel.rank0.on_rank_zero`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.artifact_manifest import read_artifact_manifest
from statecraft.checkpoint.kernel.catalog import (
    CheckpointState,
    LatestPointer,
    LatestState,
    classify,
    read_latest,
)
from statecraft.checkpoint.kernel.layout import (
    ARTIFACTS_DIR,
    LATEST_POINTER,
    MANIFEST_NAME,
    RunAttempt,
    iter_dirname,
)
from statecraft.checkpoint.kernel.verify import list_iterations, read_manifest
from statecraft.checkpoint.save.bindings import SaveContext
from statecraft.engine import Machine
from statecraft.errors import CheckpointError, ResumeError, ResumeRequiredError
from statecraft.parallel.collectives import Collective
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store

__all__ = [
    "Lifecycle",
    "complete_adopted_attempt",
    "newest_committed",
    "newest_committed_artifact",
    "pointer_behind",
    "resume_again",
    "resume_required",
    "roll_pointer_forward",
    "sweep_dead_writers",
]

log = logging.getLogger("statecraft")


@attrs.define
class Lifecycle:
    """Where one ``Checkpointer`` stands: resumed or not, saved or not, and whether it may
    save. Every rank holds its own and decides alike (every rank calls the facade's methods
    in the same order); what is on disk is looked at on rank 0 only.

    Attributes:
        resumed: ``resume()`` returned (an explicit resume and ``resume=off`` count).
        fresh_reason: why ``resume()`` started fresh in an attempt it did not mint
            (``resume=off`` with a pinned ``run_ts``, or ``resume=auto`` finding no checkpoint
            that verifies), else ``None``.
        saved: the iteration of this process's last completed save (``None``: none yet).
        may_save: saves are allowed: resumed from a checkpoint, a minted attempt, or the
            attempt held no commit at the first save.
    """

    resumed: bool = False
    saved: int | None = None
    may_save: bool = False
    fresh_reason: str | None = None

    def after_resume(self, result: Any, attempt: RunAttempt | None) -> None:
        """Record a successful ``resume()``: saves continue a loaded checkpoint or a minted
        attempt; a fresh start in an adopted attempt is checked at its first save."""
        self.resumed = True
        adopted = attempt is not None and not attempt.minted
        self.may_save = bool(result.resumed) or not adopted
        self.fresh_reason = None if self.may_save else str(result.reason)

    def before_resume(self, where: Path | str) -> None:
        """Refuse a second ``resume()`` and one after a save.

        Raises:
            ResumeError: naming the attempt (``where``) and, after a save, its iteration.
        """
        problem = resume_again(
            str(where), resumed=self.resumed, saved=self.saved is not None, iteration=self.saved
        )
        if problem is not None:
            raise problem

    def before_save(
        self,
        collective: Collective,
        attempt: RunAttempt | None,
        store: Store,
        *,
        artifacts: Store | None = None,
    ) -> None:
        """Refuse a save by a process that did not resume, or started fresh, into an attempt
        that holds committed checkpoints, or committed artifacts (``artifacts``: the
        attempt's ``checkpoint_artifacts`` root, ``None`` when it does not exist) (rank 0
        looks; every rank raises the same error). Once allowed, later saves are not looked
        at again (they continue this process's own series).

        Raises:
            ResumeRequiredError: the attempt holds a commit and ``resume()`` was not called,
                or it started fresh there (``fresh_reason``).
        """
        if self.may_save:
            return
        minted = attempt is not None and attempt.minted

        def newest() -> tuple[int, str] | None:
            checkpoint = newest_committed(store)
            if checkpoint is not None:
                return checkpoint, "checkpoints"
            artifact = None if artifacts is None else newest_committed_artifact(artifacts)
            return None if artifact is None else (artifact, "artifacts")

        found = None if minted else on_rank_zero(collective, newest)
        if found is not None:
            where = attempt.run_dir if attempt is not None else store.describe()
            iteration, kind = found
            raise resume_required(str(where), iteration, fresh_reason=self.fresh_reason, kind=kind)
        self.may_save = True


def complete_adopted_attempt(
    collective: Collective,
    store: Store,
    result: Any,
    *,
    machine: Machine,
    lease: WriterLease | None,
) -> None:
    """After a resume into an adopted attempt (``store``), on rank 0 and holding its writer
    lease: roll a lagging latest pointer forward to the adopted iteration
    (:func:`roll_pointer_forward`, when ``result.resumed``) and sweep dead writers'
    temporaries (:func:`sweep_dead_writers`). Every rank returns or raises rank 0's outcome.

    Raises:
        WriterLeaseError / CheckpointCorruptError / StoreError: as
            :func:`roll_pointer_forward`.
    """

    def complete() -> None:
        if result.resumed:
            roll_pointer_forward(store, result.step, machine=machine, lease=lease)
        sweep_dead_writers(store)

    on_rank_zero(collective, complete)


def newest_committed(store: Store) -> int | None:
    """The newest iteration of ``store`` that holds a readable manifest (a commit), or
    ``None``. Only manifests (and retention markers) are read: this is the cheap "does the
    attempt hold checkpoints" question, not a verification. A weights-only checkpoint counts
    (it is a commit of this series, pruned by retention); an invalidated one does not (it is
    being deleted)."""
    for iteration in list_iterations(store):
        if classify(store, iteration, level="manifest").state in _COMMITS:
            return iteration
    return None


_COMMITS = frozenset({CheckpointState.COMMITTED, CheckpointState.WEIGHTS_ONLY})


def newest_committed_artifact(artifacts: Store) -> int | None:
    """The newest iteration of the ``checkpoint_artifacts`` root ``artifacts`` that holds a
    readable artifact manifest (a commit), or ``None``. Only manifests are read."""
    for iteration in list_iterations(artifacts):
        try:
            read_artifact_manifest(artifacts, iteration)
        except (FileNotFoundError, CheckpointError):
            continue
        return iteration
    return None


def resume_required(
    attempt: str, iteration: int, *, fresh_reason: str | None = None, kind: str = "checkpoints"
) -> ResumeRequiredError:
    """The refusal of a save by a process that did not resume (or that started fresh for
    ``fresh_reason``) into ``attempt``, whose newest committed iteration is ``iteration``
    (``kind``: ``"checkpoints"``, or ``"artifacts"`` when it holds only partial artifacts,
    under ``checkpoint_artifacts/``)."""
    what = "checkpoints" if kind == "checkpoints" else f"partial artifacts (under {ARTIFACTS_DIR}/)"
    if fresh_reason is not None:
        return ResumeRequiredError(
            f"refusing to save: {attempt} already holds committed {what} (newest "
            f"{iter_dirname(iteration)}) but this process started fresh in it ({fresh_reason}),"
            " so its saves would collide with those iterations and mix two trajectories in one "
            "checkpoint series. Nothing was written. Set resume=off without a pinned run_ts to "
            "start a new attempt, or move the attempt's checkpoints aside",
            attempt=attempt,
            iteration=iteration,
        )
    return ResumeRequiredError(
        f"refusing to save: {attempt} already holds committed {what} (newest "
        f"{iter_dirname(iteration)}) and this process did not call Checkpointer.resume(), so "
        "its state is not their continuation and its saves would mix two trajectories in one "
        "checkpoint series. Nothing was written. Call ckpt.resume() before the training loop "
        "(it continues from the newest checkpoint), or set resume=off to start a new attempt",
        attempt=attempt,
        iteration=iteration,
    )


def resume_again(
    attempt: str, *, resumed: bool, saved: bool, iteration: int | None
) -> ResumeError | None:
    """The refusal of a ``resume()`` by a process that already resumed, or already saved
    (at ``iteration``) into ``attempt``; ``None`` when this is the first resume."""
    if resumed:
        return ResumeError(
            f"resume() was already called for {attempt}: the tracked objects already hold the "
            "state training continues from, and a second resume would replace it mid-run. "
            "Call resume() once, before the training loop",
            attempt=attempt,
        )
    if saved:
        return ResumeError(
            f"resume() after a save in {attempt}: this process already saved iteration "
            f"{iteration}, so loading a checkpoint now would discard the state it trained. "
            "Call resume() once, before the training loop and the first save",
            attempt=attempt,
            iteration=iteration,
        )
    return None


def _describe(pointer: LatestPointer) -> str:
    if pointer.state is LatestState.MISSING:
        return "missing"
    if pointer.state is LatestState.GARBAGE:
        return f"unreadable: {pointer.problem}"
    if pointer.iteration is None:  # pragma: no cover - OK / DANGLING always name one
        return pointer.state.value
    name = iter_dirname(pointer.iteration)
    return f"{name}, which does not exist" if pointer.state is LatestState.DANGLING else name


def pointer_behind(store: Store, iteration: int) -> LatestPointer | None:
    """What ``latest_checkpoint.txt`` says when it lags ``iteration`` (missing, unreadable,
    dangling, or naming an older iteration); ``None`` when it names ``iteration`` or a newer
    one (a newer one that does not verify is left for the next save to move), or when the
    name holds something else than a regular file (a link, a FIFO, a directory: never read,
    never replaced; resume's note names it)."""
    stat = store.stat(LATEST_POINTER)
    if stat is not None and stat.kind != "file":
        log.warning(
            "%s/%s is a %s, not a regular file: it is not rolled forward to %s; remove it "
            "(the next save writes the pointer)",
            store.describe(),
            LATEST_POINTER,
            stat.kind,
            iter_dirname(iteration),
        )
        return None
    pointer = read_latest(store, list_iterations(store))
    if pointer.state is LatestState.OK and (pointer.iteration or 0) >= iteration:
        return None
    return pointer


def _never_staged(name: str) -> Callable[[], Any]:
    def refuse() -> Any:
        raise CheckpointError(
            f"pointer roll-forward asked for the payload {name}: it only completes a "
            "committed iteration and never writes one (a bug in the save table's reconcile "
            "path)"
        )

    return refuse


def roll_pointer_forward(
    store: Store, iteration: int, *, machine: Machine, lease: WriterLease | None
) -> str | None:
    """Point ``latest`` at the committed ``iteration`` when it lags, through the save
    machine's reconcile path (the committed plan is compared with itself, the files' sizes
    checked, writer temporaries swept, the iteration made durable, then the pointer replaced
    atomically under the writer lease).

    Returns:
        the INFO line logged (``latest pointer rolled forward to iter_... (was ...)``), or
        ``None`` when the pointer already named ``iteration`` or a newer one.

    Raises:
        WriterLeaseError: another process took the attempt's lease over; nothing moved.
        CheckpointCorruptError / StoreError: the iteration's files or the pointer write
            failed; ``latest`` is as it was (a later save or resume completes it).
    """
    behind = pointer_behind(store, iteration)
    if behind is None:
        return None
    plan = read_manifest(store, iteration).plan
    ctx = SaveContext(
        store=store,
        plan=plan,
        payloads={name: _never_staged(name) for name in plan.files},
        lease=lease,
        found_level="size",  # resume verified it at the configured level before adopting it
    )
    machine.recover(ctx).raise_for_failure()
    line = f"latest pointer rolled forward to {iter_dirname(iteration)} (was {_describe(behind)})"
    log.info(line)
    return line


def sweep_dead_writers(store: Store) -> list[str]:
    """Remove the temporaries of writers that died (``.<name>.tmp-<pid>-<n>``) from the
    checkpoints root (``.latest_checkpoint.txt.tmp-*``) and from every iteration directory
    without a manifest. Call only while holding the attempt's writer lease: the lease proves
    no live writer owns them. A store without ``sweep_temporaries`` (an object store, whose
    writes are atomic) has none.

    Returns:
        the removed paths, relative to ``store``.
    """
    sweep = getattr(store, "sweep_temporaries", None)
    if sweep is None:
        return []
    removed = list(sweep(""))
    for iteration in list_iterations(store):
        name = iter_dirname(iteration)
        if store.stat(f"{name}/{MANIFEST_NAME}") is None:
            removed += [f"{name}/{leftover}" for leftover in sweep(name)]
    if removed:
        log.info(
            "removed %d temporary file(s) of dead writers: %s", len(removed), ", ".join(removed)
        )
    return removed
