"""What is fixed for one ``Checkpointer`` run: :class:`RunContext` (settled by the constructor)
and :class:`OpenAttempt` (settled once the attempt is open: its directory, its checkpoints
store, rank 0's writer lease, the archive destination).

Both are frozen: the facade's helpers read them and never change them. What changes from step
to step is the :class:`~statecraft.checkpoint.facade.run_state.RunState`.

::

    context.config.save_every, context.collective.rank     # the run's knobs and ranks
    context.machines.load("save")                           # a shipped table, loaded once
    opened = state.opened                                   # None until the attempt opens
    opened.store, opened.lease, opened.attempt.run_dir      # fixed from then on
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.kernel.layout import RunAttempt, RunIdentity
from statecraft.checkpoint.kernel.machines import load_machine
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.stop.termination import TerminationWatch
from statecraft.checkpoint.triggers import SaveTriggers
from statecraft.engine import Machine
from statecraft.parallel.collectives import Collective
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem

__all__ = ["MachineShelf", "OpenAttempt", "RunContext"]


class MachineShelf:
    """The shipped tables one run uses (``machines/<name>.toml``), each loaded and checked at
    its first use and kept for the run.

    Raises (from :meth:`load`):
        StatecraftError / MachineDefinitionError: as
            :func:`~statecraft.checkpoint.kernel.machines.load_machine`.
    """

    def __init__(self) -> None:
        self._loaded: dict[str, Machine] = {}

    def load(self, name: str) -> Machine:
        """The loaded ``machines/<name>.toml`` (loaded once per run)."""
        if name not in self._loaded:
            self._loaded[name] = load_machine(name)
        return self._loaded[name]

    def __repr__(self) -> str:
        return f"MachineShelf({sorted(self._loaded)})"


@attrs.frozen
class RunContext:
    """What the ``Checkpointer`` constructor settled for the whole run.

    Attributes:
        config: the checkpoint knobs.
        identity: the job's ``<project>/<group>/<name>``.
        output_root: the absolute directory all runs live under.
        collective: rank coordination.
        filesystem: what the local stores act through (``None``: the real OS).
        retention: the retention plan (``require_uploaded`` forced on with an archive).
        termination: the termination watch (signals, sentinel file, deadline).
        machines: the shipped tables, loaded once each.
        triggers: the save triggers beyond ``save_every`` (``Checkpointer(save_triggers=...)``).
    """

    config: CheckpointConfig
    identity: RunIdentity
    output_root: str
    collective: Collective
    filesystem: Filesystem | None
    retention: RetentionPlan
    termination: TerminationWatch
    machines: MachineShelf = attrs.field(factory=MachineShelf)
    triggers: SaveTriggers = attrs.field(factory=SaveTriggers)

    @property
    def job_dir(self) -> Path:
        """``<output_root>/<project>/<group>/<name>``: where the attempts of the job live."""
        return self.identity.job_dir(Path(self.output_root))

    @property
    def rank_zero(self) -> bool:
        """This process is rank 0 (it resolves the attempt, writes and evaluates)."""
        return self.collective.rank == 0

    @property
    def sharded(self) -> bool:
        """Full saves are DCP checkpoints (``checkpoint_format=dcp``): every rank writes."""
        return self.config.checkpoint_format == "dcp"


@attrs.frozen
class OpenAttempt:
    """The attempt this process writes, once opened (at the first ``resume()`` / save).

    Attributes:
        attempt: the resolved ``<job>/<RUN_TS>`` (its run, checkpoints and artifacts dirs).
        store: the attempt's checkpoints store.
        lease: rank 0's writer lease (``None`` on other ranks, and after ``close()``).
        exit_release: the lease's release registered at interpreter exit (``None``: none).
        destination: where full saves are archived (``upload.enabled``, rank 0), else
            ``None``.
    """

    attempt: RunAttempt
    store: Store
    lease: WriterLease | None
    exit_release: Callable[[], None] | None = None
    destination: ArchiveDestination | None = None

    @property
    def checkpoints_location(self) -> str:
        """The checkpoints directory, as reports and log lines name it."""
        return str(self.attempt.checkpoints_dir)
