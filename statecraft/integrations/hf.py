"""Crash-consistent ``checkpoint-N`` folders for the Hugging Face ``Trainer``.

One line to add to a training script::

    from statecraft.integrations.hf import StatecraftCallback, last_committed_checkpoint

    trainer = Trainer(..., callbacks=[StatecraftCallback()])
    trainer.train(resume_from_checkpoint=last_committed_checkpoint(args.output_dir))

What the callback guarantees (``docs/integrations/hf.md`` has the full list):

- **Commit.** After the Trainer has written ``output_dir/checkpoint-<global_step>`` (``on_save``
  fires after ``Trainer._save_checkpoint`` returned), the folder is sealed as a committed unit
  (:func:`statecraft.checkpoint.units.seal_unit` with no payloads: every file and directory is
  fsynced and digested, the commit manifest is created last, the parent directory is fsynced).
  A folder without its manifest is a save that did not finish.
- **Resume.** :func:`last_committed_checkpoint` returns the newest ``checkpoint-N`` that
  verifies (every digest), logging at WARNING each newer folder it passed over and why.
  :func:`verified_checkpoint` checks one explicit path and raises if it is not committed.
- **Retention.** The callback takes over ``save_total_limit``: the Trainer's own
  ``rotate_checkpoints`` deletes old folders inside ``_save_checkpoint``, *before* the new
  folder is committed, with ``shutil.rmtree`` (a kill mid-delete leaves a half folder that
  ``get_last_checkpoint`` adopts). The callback records the limit, sets
  ``args.save_total_limit = None`` (logged), and after each seal prunes the oldest committed
  folders beyond the limit with :func:`~statecraft.checkpoint.units.prune_unit` (manifest
  deleted durably first, then the tree), never the newest committed folder and never
  ``state.best_model_checkpoint``. Uncommitted folders older than the newest committed one are
  garbage and pruned too.
- **Stale trajectories.** At ``on_train_begin`` the resume point is ``state.global_step`` (the
  Trainer has loaded ``trainer_state.json`` by then; 0 for a fresh run), and the resumed
  ``checkpoint-<global_step>``, when it is in ``output_dir``, must verify (every digest).
  Uncommitted folders newer than it are leftovers of a killed run and are removed (logged). A
  *committed* (or damaged: it once held a commit) folder newer than it means an older
  checkpoint is being resumed into a directory that already holds a newer trajectory: refused
  with :class:`~statecraft.errors.UnitError` before any step runs, nothing removed.

What it cannot do: the Trainer loads ``resume_from_checkpoint`` *before* ``on_train_begin``
(``Trainer.train`` → ``_load_from_checkpoint`` and ``TrainerState.load_from_json``, then
``_inner_training_loop`` → optimizer/scheduler/scaler loading → ``on_train_begin``). A partial
folder passed explicitly is therefore read before the callback sees it; the callback refuses to
train from it in ``on_train_begin`` (when it is ``output_dir/checkpoint-<global_step>``), but
only :func:`verified_checkpoint` / :func:`last_committed_checkpoint` keep it from being read.

Distributed runs: every rank calls ``on_save``; all ranks meet at a barrier
(``torch.distributed`` when initialized) so every rank's files (``rng_state_<rank>.pth``) are
written, the saving process (``args.should_save``: world process zero, or each node's local
zero with ``save_on_each_node``) seals, and all ranks meet again (an all-gather of the outcome)
so no rank goes on before the commit exists. A failure on the saving process reaches every
rank, so all of them raise instead of one raising and the others hanging.

Failure modes: a seal that fails raises (:class:`~statecraft.errors.UnitError` /
:class:`~statecraft.errors.StoreError`) out of ``trainer.train()``: training stops rather than
continuing with checkpoints that are not durable. A folder the Trainer did not create under
``args.output_dir`` (hyperparameter search writes to ``run-<trial>/``) is an error.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

try:
    from transformers import Trainer, TrainerCallback
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "statecraft.integrations.hf needs the Hugging Face Trainer: "
        "pip install 'statecraft[hf]' (transformers and accelerate)"
    ) from exc

from statecraft.checkpoint.catalog_api.unit_layouts import hf_folders
from statecraft.checkpoint.units import (
    UnitReport,
    prune_unit,
    seal_unit,
    verify_unit,
)
from statecraft.errors import UnitError
from statecraft.integrations.hf_folders import (
    LOG,
    checkpoint_folders,
    folder_store,
    last_committed_checkpoint,
    raise_not_committed,
    verified_checkpoint,
)
from statecraft.storage.local import LocalStore

__all__ = [
    "FRAMEWORK",
    "StatecraftCallback",
    "checkpoint_folders",
    "last_committed_checkpoint",
    "verified_checkpoint",
]

#: the ``framework`` recorded in every manifest this module seals
FRAMEWORK = "hf-trainer"


def _distributed() -> Any:
    """``torch.distributed`` when a process group is initialized, else ``None``."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def _collective(should_act: bool, action: Callable[[], None]) -> None:
    """Every rank: a barrier (so every rank's files are written), ``action`` on the acting
    process, then an all-gather of the outcome, which no rank leaves before the acting
    process finished (so no rank goes on before the commit exists). Every rank raises if any
    failed: the acting process its own exception, the others a :class:`UnitError` carrying
    its message. Without a process group: ``action`` alone."""
    dist = _distributed()
    if dist is not None:
        dist.barrier()
    failure: BaseException | None = None
    if should_act:
        try:
            action()
        except Exception as exc:  # re-raised below, once every rank knows
            failure = exc
    if dist is not None:
        messages: list[str | None] = [None] * dist.get_world_size()
        dist.all_gather_object(messages, None if failure is None else str(failure))
        others = [m for m in messages if m is not None]
        if failure is None and others:
            raise UnitError(f"statecraft on another rank: {others[0]}")
    if failure is not None:
        raise failure


def _constructing_trainer() -> Any | None:
    """The ``Trainer`` whose ``__init__`` is on the stack (it fires ``on_init_end``), or
    ``None`` when the event was fired some other way."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if frame.f_code.co_name == "__init__" and isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


class StatecraftCallback(TrainerCallback):
    """Seals every ``checkpoint-N`` the ``Trainer`` writes and takes over ``save_total_limit``.

    Attach with ``Trainer(..., callbacks=[StatecraftCallback()])`` (or
    ``trainer.add_callback(StatecraftCallback())`` before ``train()``); resume with
    ``trainer.train(resume_from_checkpoint=last_committed_checkpoint(args.output_dir))``.

    Args:
        log: where decisions are reported (default ``statecraft.hf``).

    Attributes:
        save_total_limit: the limit taken over from ``args`` (``None``: keep everything).
        reports: the :class:`~statecraft.checkpoint.units.UnitReport` of every seal this
            callback made (unit, manifest, seconds, the folders retired after it).

    Raises (out of ``trainer.train()``):
        UnitError: a committed folder newer than the resume point (two trajectories would mix in
            one series), or the resumed ``checkpoint-<global_step>`` in ``output_dir`` is not
            committed; a seal found no ``checkpoint-<global_step>`` under ``args.output_dir``.
        UnitCommittedError, UnitDamagedError, StoreError: from the seal (see
            :func:`~statecraft.checkpoint.units.seal_unit`).
    """

    def __init__(self, *, log: logging.Logger | None = None) -> None:
        self.log = log if log is not None else LOG
        self.save_total_limit: int | None = None
        self.reports: list[UnitReport] = []
        self._took_over = False

    def __repr__(self) -> str:
        return f"StatecraftCallback(save_total_limit={self.save_total_limit!r})"

    # -- limit take-over -------------------------------------------------------------------

    def _take_over_limit(self, args: Any) -> None:
        limit = getattr(args, "save_total_limit", None)
        if limit is None:
            return
        if limit <= 0:  # the Trainer treats <= 0 as "no deletion"
            limit = None
        self.save_total_limit = limit
        self._took_over = True
        args.save_total_limit = None
        self.log.info(
            "statecraft takes over save_total_limit=%s: set args.save_total_limit=None so the "
            "Trainer's own rotation (rmtree before the new checkpoint is committed) never runs; "
            "older committed checkpoints are pruned after each commit, invalidate-then-delete",
            limit,
        )

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._take_over_limit(args)
        if not getattr(args, "should_save", True):
            return
        output_dir = os.fspath(args.output_dir)
        trainer = _constructing_trainer()
        if trainer is None:  # built by hand, not by Trainer.__init__: say it now
            self._warn_if_newest_uncommitted(output_dir)
            return
        train = trainer.train

        @functools.wraps(train)
        def train_warning_first(*a: Any, **kw: Any) -> Any:
            resume = kw.get("resume_from_checkpoint", a[0] if a else None)
            if isinstance(resume, bool) and resume:  # the Trainer's own test
                self._warn_if_newest_uncommitted(output_dir)
            return train(*a, **kw)

        trainer.train = train_warning_first

    def _warn_if_newest_uncommitted(self, output_dir: str) -> None:
        """``Trainer.train(resume_from_checkpoint=True)`` resolves the newest folder with
        ``get_last_checkpoint`` (no completeness check) before any callback runs: when it is
        called so (the only call that picks a folder unchecked) over a killed save's leftover,
        say so before the Trainer reads it. Reads only."""
        folders = checkpoint_folders(output_dir)
        if not folders:
            return
        newest = folders[0][1]  # newest first
        verdict = verify_unit(folder_store(output_dir), newest, deep=False)
        if verdict.state != "committed":
            self.log.warning(
                "%s is %s (%s): Trainer.train(resume_from_checkpoint=True) picks it "
                "(transformers' get_last_checkpoint takes the newest folder unchecked) and "
                "will fail or load a torn state; pass "
                "resume_from_checkpoint=last_committed_checkpoint(output_dir) instead",
                os.path.join(output_dir, newest), verdict.state, verdict.reason,
            )  # fmt: skip

    # -- resume checks ---------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._take_over_limit(args)
        output_dir = os.fspath(args.output_dir)
        resume_step = int(state.global_step or 0)
        _collective(bool(args.should_save), lambda: self._check_start(output_dir, resume_step))

    def _check_start(self, output_dir: str, resume_step: int) -> None:
        """The resumed folder (when it is in ``output_dir``) must verify deeply; newer
        folders must not hold a commit (committed or damaged: a trajectory beyond the resume
        point); newer uncommitted ones are removed. Nothing is removed when refusing."""
        folders = checkpoint_folders(output_dir)
        if not folders:
            return
        store = folder_store(output_dir)  # output_dir exists: it holds the folders
        if resume_step > 0:
            resumed = f"{PREFIX_CHECKPOINT_DIR}-{resume_step}"
            if any(name == resumed for _, name in folders):
                verdict = verify_unit(store, resumed, deep=True)
                if not verdict.committed:
                    raise_not_committed(os.path.join(output_dir, resumed), verdict)
        newer = [
            verify_unit(store, name, deep=False) for step, name in folders if step > resume_step
        ]
        beyond = [v for v in newer if v.state != "uncommitted"]
        if beyond:
            where = "a fresh run (step 0)" if resume_step == 0 else f"step {resume_step}"
            found = ", ".join(
                v.unit if v.committed else f"{v.unit} ({v.state}: {v.reason})"
                for v in sorted(beyond, key=lambda v: v.unit)
            )
            raise UnitError(
                f"{output_dir} already holds committed checkpoint(s) newer than the resume "
                f"point, {where}: {found}. Training on would mix two trajectories in one "
                "series of checkpoint-N folders. Resume from the newest "
                "(resume_from_checkpoint=last_committed_checkpoint(output_dir)), or use a fresh "
                "output_dir.",
                path=output_dir,
                reason="committed checkpoint newer than the resume point",
            )
        for verdict in newer:
            self.log.warning(
                "removing %s: newer than the resume point (step %d) and not committed (%s), "
                "left by a run that was killed",
                os.path.join(output_dir, verdict.unit),
                resume_step,
                verdict.reason,
            )
            prune_unit(store, verdict.unit)

    # -- seal and prune --------------------------------------------------------------------

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        output_dir = os.fspath(args.output_dir)
        step = int(state.global_step)
        best = state.best_model_checkpoint
        _collective(bool(args.should_save), lambda: self._seal(output_dir, step, best))

    def _seal(self, output_dir: str, step: int, best: str | None) -> None:
        unit = f"{PREFIX_CHECKPOINT_DIR}-{step}"
        store = folder_store(output_dir)
        saved = store.stat(unit) if os.path.isdir(output_dir) else None
        if saved is None or not saved.is_dir:
            raise UnitError(
                f"{os.path.join(output_dir, unit)}: the Trainer saved no checkpoint here "
                "(hyperparameter search writes run-<trial>/ folders, which this callback does "
                "not seal); use one output_dir per run",
                path=os.path.join(output_dir, unit),
                reason="no checkpoint folder",
            )
        retire = self._retire_list(store, output_dir, step, best)
        report = seal_unit(
            store,
            unit,
            framework=FRAMEWORK,
            step=step,
            meta={"output_dir": os.path.abspath(output_dir)},
            expect=(TRAINER_STATE_NAME,),  # written last by _save_checkpoint on this process
            retire=retire,
        )
        self.reports.append(report)
        self.log.info(
            "committed %s (%d bytes, %.3f s)%s",
            os.path.join(output_dir, unit),
            report.bytes,
            report.seconds,
            f"; pruned {', '.join(report.retired)}" if report.retired else "",
        )

    def _retire_list(
        self, store: LocalStore, output_dir: str, step: int, best: str | None
    ) -> list[str]:
        """What to prune once ``checkpoint-<step>`` is committed: the uncommitted folders
        older than it (garbage: saves that never finished), then, with a limit, the oldest of
        the committed or damaged ones beyond it, never ``best``, by the Trainer's own rule
        (keep ``max(limit, len(protected))``, the new folder and ``best`` protected). A
        damaged folder is never deleted as garbage: it once held a commit (a file edited or
        added after it, bit rot); it only ages out under the limit."""
        best_name = os.path.basename(os.path.normpath(best)) if best else None
        retire: list[str] = []
        aged: list[str] = []  # committed or damaged, oldest first
        for older_step, name in sorted(hf_folders(store)):
            if older_step >= step:
                continue
            verdict = verify_unit(store, name, deep=False)
            if verdict.state != "uncommitted":
                aged.append(name)
            elif name != best_name:
                self.log.warning(
                    "pruning %s: older than the checkpoint being committed and uncommitted (%s)",
                    os.path.join(output_dir, name),
                    verdict.reason,
                )
                retire.append(name)
        if self.save_total_limit is None:
            return retire
        protected = 1 + (1 if best_name in aged else 0)
        remaining = len(aged) + 1
        keep = max(self.save_total_limit, protected)
        for name in aged:
            if remaining <= keep:
                break
            if name != best_name:
                retire.append(name)
                remaining -= 1
        return retire
