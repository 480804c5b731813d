"""Real runs holding a durable-validation checkpoint: the regular committed iterations 2, 4, 6
and 8 of :func:`checkpoint_runs.committed_run` (saved with the disabled validation identity),
then iteration 10 saved through the production save machine with ``trainer.pt`` recording
``IDENTITY`` at stage ``evaluation_pending`` — what the validation transaction's first step
writes. Its later stages are the visibility records, written here by exclusive create the way
that transaction writes them."""

from __future__ import annotations

from pathlib import Path

from checkpoint_runs import RUN, open_checkpointer, train

import statecraft as sc
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.kernel.validation_records import (
    EVALUATED_RECORD,
    PUBLISHED_RECORD,
    EvaluatedRecord,
    PublishedRecord,
    ValidationIdentity,
    ValidationStage,
    ValidationState,
)
from statecraft.checkpoint.save.saving import save_full_checkpoint
from statecraft.checkpoint.state import gather_rng_inventory
from statecraft.storage.local import LocalStore

IDENTITY = ValidationIdentity(True, "heldout", ValidationIdentity.config_digest({"every": 10}))
PENDING = 10
METRICS = {"loss": 0.25}


def attempt_of(out: Path) -> Path:
    return next(p for p in RUN.job_dir(out).iterdir() if p.is_dir())


def checkpoints_of(out: Path) -> Path:
    return attempt_of(out) / "checkpoints"


def save_pending(out: Path, *, data: bool) -> None:
    """Resume the committed run at 8, train to 10 and save iteration 10 evaluation-pending."""
    ckpt, objects = open_checkpointer(out, data=data)
    ckpt.resume()
    train(ckpt, objects, PENDING - 9)  # to 9: off the save_every=2 cadence
    objects.step()
    ckpt.record(sc.Outcome.APPLIED)  # step 10 without step_end (no regular save)
    save_full_checkpoint(
        ckpt.tracked,
        LocalStore(str(checkpoints_of(out))),
        rng=gather_rng_inventory(rank=0, world_size=1),
        data=None if not data else _data_state(ckpt),
        step=ckpt.step,
        lease=None,
        machine=load_machine("save"),
        location=str(checkpoints_of(out)),
        validation=ValidationState(IDENTITY, ValidationStage.EVALUATION_PENDING),
    )
    ckpt.close()


def _data_state(ckpt: object) -> object:
    from statecraft.checkpoint.state import gather_data_state

    tracked = ckpt.tracked  # type: ignore[attr-defined]
    return gather_data_state(tracked.data, collective=ckpt.collective)  # type: ignore[attr-defined]


def write_evaluated(out: Path, iteration: int = PENDING) -> None:
    store = LocalStore(str(checkpoints_of(out)))
    record = EvaluatedRecord(iteration, dict(METRICS), IDENTITY)
    store.create_exclusive(f"{iter_dirname(iteration)}/{EVALUATED_RECORD}", record.encode())


def write_published(out: Path, iteration: int = PENDING) -> None:
    store = LocalStore(str(checkpoints_of(out)))
    record = PublishedRecord(iteration)
    store.create_exclusive(f"{iter_dirname(iteration)}/{PUBLISHED_RECORD}", record.encode())
