"""The records of a stopped run: why it stopped (:class:`StopDecision`), what its emergency
save did (:class:`EmergencyReport`), and the run's end record ``DONE.json``
(:class:`DoneRecord`).

::

    <RUN_TS>/DONE.json     written atomically after the window's last checkpoint is durable:
                           {"schema": "statecraft.done.v1", "step": 120,
                            "preempted": "signal SIGTERM",        # null: normal completion
                            "checkpoint": "checkpoints/iter_000000120", "saved": true, ...}

A stop reason is one of :data:`STOP_REASONS` in the fixed priority order every rank applies
when ranks observed different reasons (:func:`first_reason`): a signal delivered to the
process, then the sentinel file, then the deadline. ``DONE.json`` is replaced by every window
that ends (normal completion or a stop); the next window's ``resume()`` reads and logs it.
It never decides anything about resume: a requeued run resumes from what ``latest`` names.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

__all__ = [
    "DONE_FILE",
    "DONE_SCHEMA",
    "STOP_REASONS",
    "DoneRecord",
    "EmergencyKind",
    "EmergencyReport",
    "StopDecision",
    "first_reason",
    "signal_reason",
]

DONE_FILE = "DONE.json"
DONE_SCHEMA = "statecraft.done.v1"

#: every stop reason, in the priority order :func:`first_reason` applies
STOP_REASONS = (
    "signal SIGUSR1",
    "signal SIGUSR2",
    "signal SIGTERM",
    "signal SIGINT",
    "signal SIGHUP",
    "sentinel",
    "deadline",
)


def signal_reason(name: str) -> str:
    """The reason recorded for a handled signal: ``signal_reason("SIGTERM") == "signal
    SIGTERM"``.

    Raises:
        ValueError: ``name`` is not a signal :data:`STOP_REASONS` knows.
    """
    reason = f"signal {name}"
    if reason not in STOP_REASONS:
        raise ValueError(f"{name!r} is not a termination signal statecraft handles")
    return reason


def first_reason(reasons: Iterable[str | None]) -> str | None:
    """The reason every rank records when ranks observed ``reasons`` (``None``: nothing seen
    on that rank): the first in :data:`STOP_REASONS` order; ``None`` when no rank saw one.

    Example:
        >>> first_reason([None, "sentinel", "signal SIGTERM"])
        'signal SIGTERM'
    """
    seen = {r for r in reasons if r is not None}
    unknown = seen.difference(STOP_REASONS)
    if unknown:
        raise ValueError(f"unknown stop reason(s) {sorted(unknown)}; expected {STOP_REASONS}")
    return next((r for r in STOP_REASONS if r in seen), None)


@attrs.frozen
class StopDecision:
    """One ``TerminationWatch.should_stop()`` answer; the same on every rank.

    Attributes:
        stop: the loop must stop at this step boundary.
        reason: the recorded reason (:data:`STOP_REASONS`); ``None`` exactly when not
            ``stop``.
        ranks: the ranks that observed a reason themselves (``()`` when not ``stop``; a
            single-process run: ``(0,)``).
        decided_at: ``time.time()`` when the decision was taken (the start of the
            decision-to-durable interval the emergency save logs).
    """

    stop: bool
    reason: str | None = None
    ranks: tuple[int, ...] = ()
    decided_at: float = 0.0

    def __attrs_post_init__(self) -> None:
        if self.stop != (self.reason is not None):
            raise ValueError("StopDecision: reason is set exactly when stop is true")

    def __bool__(self) -> bool:
        return self.stop


class EmergencyKind(enum.Enum):
    """What the emergency save at a stop wrote
    (:mod:`statecraft.checkpoint.stop.emergency_plan`)."""

    CHECKPOINT = "checkpoint"  # a full checkpoint, checkpoints/iter_N, latest names it
    EVALUATION_PENDING = "evaluation_pending"  # a full checkpoint, evaluation-pending
    ARTIFACT = "artifact"  # the run plan plus model: checkpoint_artifacts/iter_N
    COVERED = "covered"  # nothing: the step already holds every component of the plan


@attrs.frozen
class EmergencyReport:
    """What the emergency transaction did at one stop (rank 0 fills every field; other ranks
    get the same record).

    Attributes:
        reason: the stop reason.
        step: the optimizer step saved (the checkpoint iteration).
        kind: what was written (``COVERED``: nothing, the step was already on disk).
        components: the plan's logical components (``("model", "optimizer",
            "training_state")`` for the full plan).
        path: the committed directory relative to the run dir (``checkpoints/iter_…`` or
            ``checkpoint_artifacts/iter_…``); for ``COVERED`` the one already there.
        seconds_to_durable: from the stop decision to the checkpoint durable (and, for
            ``COVERED``, to the coverage check).
    """

    reason: str
    step: int
    kind: EmergencyKind
    components: tuple[str, ...]
    path: str
    seconds_to_durable: float


@attrs.frozen
class DoneRecord:
    """``<RUN_TS>/DONE.json``: how the last window of the attempt ended.

    Attributes:
        schema: :data:`DONE_SCHEMA`.
        step: the optimizer step the window ended at.
        preempted: the stop reason (``None``: normal completion through ``finalize()``).
        checkpoint: the run-dir relative path of the window's last durable checkpoint or
            artifact of that step (``None``: nothing was saved at that step, for example
            ``save_every=0`` without a stop).
        saved: this window's stop or final boundary wrote that checkpoint (false: it was
            already on disk, skipped by coverage).
        seconds_to_durable: the emergency save's decision-to-durable time (``None`` for a
            normal completion).
        finished_at: ``time.time()`` when the record was written.
        host: the writing host's name; pid: its process id.
    """

    schema: str
    step: int
    preempted: str | None
    checkpoint: str | None
    saved: bool
    seconds_to_durable: float | None
    finished_at: float
    host: str
    pid: int
