"""One partial artifact save through the ``artifact`` machine (``machines/artifact.toml``), on
the rank that writes, and its :class:`ArtifactReport`.

The payloads are the plan model's (:data:`~statecraft.checkpoint.kernel.plan.CHECKPOINT_PLAN`)
restricted to the plan's files; the trainer state is captured (and refuses unloadable
values) only when the plan holds ``training_state``. The machine's ``recover`` run observes
``checkpoint_artifacts/iter_N`` and writes, or refuses a committed or damaged one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import attrs

from statecraft._version import __version__
from statecraft.checkpoint.artifacts.bindings import ArtifactContext
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.evaluation import Evaluation, format_metrics
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN
from statecraft.checkpoint.state import DataState
from statecraft.checkpoint.state.capture import capture_trainer
from statecraft.engine import RunResult
from statecraft.errors import CheckpointError
from statecraft.storage.base import Store

__all__ = ["ArtifactReport", "save_artifact"]

log = logging.getLogger("statecraft")


@attrs.frozen
class ArtifactReport:
    """One committed artifact: where, which components, how big, how long, the metrics of
    its evaluation (``None`` when none ran) and the effects' trace."""

    iteration: int
    location: str
    components: tuple[str, ...]
    bytes_written: int
    seconds: float
    metrics: dict[str, float] | None
    evaluated: bool
    effects: tuple[tuple[str, float], ...]


@attrs.frozen
class _Unselected:
    """Stands in for the trainer state or data state of a plan without ``training_state``:
    the plan model asks for their producers, the artifact never calls them."""

    what: str
    optimizer_step: int

    def to_payload(self) -> Any:
        raise CheckpointError(
            f"the artifact plan does not hold training_state, yet its {self.what} was asked "
            "for; this is a bug in the artifact payload selection"
        )


def _payloads(
    tracked: Any, plan: ComponentPlan, *, rng: Any, data: DataState | None, step: int
) -> dict[str, Any]:
    with_data = tracked.data is not None
    trainer: Any
    if "training_state" in plan.components:
        trainer = capture_trainer(tracked, rng=rng, data=data)  # refuses before any write
        gathered: Any = data
    else:
        trainer = _Unselected("trainer state", step)
        gathered = _Unselected("data state", step) if with_data else None
    every = CHECKPOINT_PLAN.payloads(tracked, trainer, data=gathered)
    return {name: every[name] for name in plan.files(with_data=with_data)}


def save_artifact(
    tracked: Any,
    store: Store,
    *,
    plan: ComponentPlan,
    rng: Any,
    data: DataState | None,
    step: int,
    lease: WriterLease | None,
    machine: Any,
    location: str,
    evaluation: Evaluation | None = None,
    evaluate_first: bool = False,
) -> ArtifactReport:
    """Save the partial artifact of ``plan`` at iteration ``step`` through the artifact machine.

    Args:
        tracked: the tracked objects (``Tracked``).
        store: the attempt's ``checkpoint_artifacts`` root store (the save creates it).
        plan: a partial plan (the full plan is a checkpoint: :func:`save_full_checkpoint`).
        rng: every rank's RNG streams (used only with ``training_state``).
        data: every rank's data state, or ``None`` (used only with ``training_state``).
        lease: this process's writer lease, checked before every publication.
        machine: the loaded ``artifact`` machine.
        location: the ``checkpoint_artifacts`` directory, for the report and the log line.
        evaluation: the loop's evaluation when validation is due at this step.
        evaluate_first: validation alone asked for the artifact: evaluate, commit after
            success, record the metrics in the manifest. Otherwise ``evaluation`` runs after
            the commit and its metrics go to the report and an INFO log line only.

    Raises:
        ValidationFailedError: the evaluation failed; with ``evaluate_first`` nothing was
            written, otherwise the artifact is committed and stays.
        ArtifactCommittedError: the step already holds a committed artifact (nothing written).
        CheckpointCorruptError: the step holds a damaged artifact or a full-checkpoint
            manifest (nothing written).
        UnsafeStateError / StoreError / WriterLeaseError: the save failed before its commit;
            its uncommitted files were removed.
    """
    ctx = ArtifactContext(
        store=store,
        plan=plan,
        iteration=step,
        payloads=_payloads(tracked, plan, rng=rng, data=data, step=step),
        with_data=tracked.data is not None,
        evaluation=evaluation,
        evaluate_first=evaluate_first,
        writer_info=_writer_info(),
        lease=lease,
    )
    where = f"{location}/{iter_dirname(step)}"
    started = time.perf_counter()
    result: RunResult = machine.recover(ctx)
    seconds = time.perf_counter() - started
    if result.final_state == "validation_failed":
        log.warning("artifact %s is committed; its validation after the commit failed", where)
    result.raise_for_failure()
    report = ArtifactReport(
        iteration=step,
        location=where,
        components=plan.components,
        bytes_written=sum(r.size for r in ctx.records.values()),
        seconds=seconds,
        metrics=None if ctx.metrics is None else dict(ctx.metrics),
        evaluated=ctx.evaluated,
        effects=tuple((e.effect, e.duration_s) for e in result.trace),
    )
    mib = report.bytes_written / 2**20
    log.info(
        "saved artifact %s of iter %d: %s MiB in %.3f s -> %s",
        plan,
        step,
        f"{mib:.1f}" if mib >= 1 else f"{mib:.3f}",
        seconds,
        where,
    )
    if ctx.evaluated and not evaluate_first:
        log.info(
            "validated iter %d after committing its artifact: %s",
            step,
            format_metrics(report.metrics),
        )
    return report


def _writer_info() -> dict[str, str]:
    return {"statecraft": __version__}
