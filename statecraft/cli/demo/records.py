"""The demo's records: one launch (:class:`Launch`), the whole report (:class:`DemoReport`),
the knobs of the kill and preemption schedule, and :class:`DemoError`."""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.errors import DemoError

__all__ = ["LAUNCH_TIMEOUT_S", "SAVE_KILL_DELAY_S", "DemoError", "DemoReport", "Launch"]

#: A launch that has not finished after this many seconds is killed and reported as an error.
LAUNCH_TIMEOUT_S = 300.0
#: A kill triggered by ``save-begin`` is sent a random delay after the line, so that kills land
#: throughout the save: up to 80% of the median save time observed so far, at most this long.
SAVE_KILL_DELAY_S = 0.03
_FIRST_SAVE_DELAY_S = 0.005  # the cap before any save time has been observed
_LIST_DETAIL = 3  # a list with more differing items than this is summarized in one line
TRAINING_SEED = 0


@attrs.define
class Launch:
    """One process of the demo and what happened to it.

    Attributes:
        run: ``"reference"`` or ``"killed"``.
        index: 1-based launch number within its run.
        resumed_step / resume_source: from the ``resumed`` line (source ``None``: fresh start).
        trigger: the line the kill was aimed at (``"step 37"``, ``"save-begin 20"``), or None.
        kill_delay_ms: how long after a ``save-begin`` trigger the signal was sent, so that
            kills land at different points of the save.
        killed: this launch was SIGKILLed by the demo.
        last_line: the last progress line the process wrote before it ended.
        killed_in_save: the iteration whose save the kill interrupted, or None.
        last_step: the last ``step`` line seen (None before the first step).
        saves: ``[iteration, seconds, blocking seconds]`` of each ``save-end`` line.
        done_step: the ``done`` line's step, or None when the launch did not complete.
        returncode: the process's exit status (``-9`` for SIGKILL).
        wall_s: seconds from launch to exit.
        latest: after a kill: the iteration ``latest_checkpoint.txt`` names, or None.
        latest_verified: after a kill: whether that iteration verifies (None: no pointer yet).
        latest_problem: why it does not verify.
        partial: after a kill: ``iter_*`` directories without a manifest (never adopted).
        save_state: after a kill inside a save: what that iteration looked like on disk.
        killed_in_validation: the iteration whose validation the kill interrupted (a kill on
            its ``evaluated`` line), or None.
        validation_state: after such a kill: that checkpoint's validation stage on disk
            (``evaluation_pending``, ``publication_pending`` or ``published``).
        resumed_stage: the validation stage the adopted checkpoint was in when this launch
            resumed it, when pending (``resume()`` finished it), else None.
        evaluated: the steps whose evaluation this launch ran (``evaluated`` lines).
        published: the iterations whose validation this launch published.
        action: how the trigger interrupts the launch: ``"SIGKILL"`` or ``"sentinel"`` (a
            preemption: the demo creates the sentinel file on the trigger line and the
            process stops by itself at its next step boundary).
        sentinel_created: the demo created the sentinel file for this launch.
        stop_step / stop_kind / stop_path / stop_seconds / stop_reason: from the ``stopped``
            line: the step the run stopped at, what its emergency save wrote (``checkpoint``,
            ``evaluation_pending``, ...), where (run-dir relative), its decision-to-durable
            seconds and the reason (``sentinel``); None when the launch did not stop.
        done_record: after a stop: ``DONE.json`` of the attempt as the launch left it.
        sentinel_consumed: after a stop: the sentinel was renamed ``*.consumed`` (so the
            requeued launch does not stop at once).
        stop_verified: after a stop: the emergency checkpoint verifies (digest level).
        error: what went wrong (timeout, crash), or None.
    """

    run: str
    index: int
    command: list[str]
    resumed_step: int | None = None
    resume_source: str | None = None
    trigger: str | None = None
    kill_delay_ms: float = 0.0
    killed: bool = False
    last_line: str | None = None
    killed_in_save: int | None = None
    last_step: int | None = None
    saves: list[list[float]] = attrs.field(factory=list)
    done_step: int | None = None
    returncode: int | None = None
    wall_s: float = 0.0
    latest: int | None = None
    latest_verified: bool | None = None
    latest_problem: str | None = None
    partial: list[str] = attrs.field(factory=list)
    save_state: str | None = None
    killed_in_validation: int | None = None
    validation_state: str | None = None
    resumed_stage: str | None = None
    evaluated: list[int] = attrs.field(factory=list)
    published: list[int] = attrs.field(factory=list)
    action: str = "SIGKILL"
    sentinel_created: bool = False
    stop_step: int | None = None
    stop_kind: str | None = None
    stop_path: str | None = None
    stop_seconds: float | None = None
    stop_reason: str | None = None
    done_record: dict[str, Any] | None = None
    sentinel_consumed: bool | None = None
    stop_verified: bool | None = None
    error: str | None = None

    @property
    def interrupted(self) -> bool:
        """SIGKILLed, or stopped by the sentinel before it completed."""
        return self.killed or self.stop_step is not None


@attrs.define
class DemoReport:
    """Everything ``statecraft demo`` did and found (the ``--json`` ``data``)."""

    out: str
    seed: int
    steps: int
    save_every: int
    kills_requested: int
    validate_every: int = 0
    preempt: bool = False
    emergency_checkpoints: list[int] = attrs.field(factory=list)
    launches: list[Launch] = attrs.field(factory=list)
    reference_checkpoints: list[int] = attrs.field(factory=list)
    killed_checkpoints: list[int] = attrs.field(factory=list)
    reference_published: list[int] = attrs.field(factory=list)
    killed_published: list[int] = attrs.field(factory=list)
    final_iteration: int | None = None
    compared: list[int] = attrs.field(factory=list)
    differences: list[str] = attrs.field(factory=list)
    save_seconds: dict[str, float] = attrs.field(factory=dict)
    final_bytes: int = 0
    wall_s: float = 0.0
    errors: list[str] = attrs.field(factory=list)

    @property
    def kills(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.killed]

    @property
    def preemptions(self) -> list[Launch]:
        """The launches stopped through the sentinel file (an emergency save, exit 0)."""
        return [launch for launch in self.launches if launch.stop_step is not None]

    @property
    def extra_checkpoints(self) -> list[int]:
        """Iterations only the killed run holds: its emergency checkpoints off the cadence."""
        return [i for i in self.emergency_checkpoints if i not in self.reference_checkpoints]

    @property
    def bit_exact(self) -> bool:
        return (
            not self.errors
            and not self.differences
            and self.final_iteration == self.steps
            and self.reference_checkpoints
            == [i for i in self.killed_checkpoints if i not in self.extra_checkpoints]
            and self.reference_published == self.killed_published
            and len(self.preemptions) == int(self.preempt)
        )

    @property
    def expected_published(self) -> list[int]:
        """The validation checkpoints a completed run publishes: every ``validate_every``-th
        step and the final one."""
        every = self.validate_every
        if every <= 0:
            return []
        steps = list(range(every, self.steps + 1, every))
        return steps if self.steps % every == 0 else [*steps, self.steps]

    def publication_problems(self) -> list[str]:
        """One line per run whose published validation checkpoints are not the expected."""
        return [
            f"{name} run: published validation checkpoints {published}, expected "
            f"{self.expected_published} (every {self.validate_every} steps and the final one)"
            for name, published in (
                ("reference", self.reference_published),
                ("killed", self.killed_published),
            )
            if self.validate_every and published != self.expected_published
        ]

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["bit_exact"] = self.bit_exact
        data["kills_performed"] = len(self.kills)
        data["preemptions_performed"] = len(self.preemptions)
        return data
