"""The start and the end of a :class:`~statecraft.checkpoint.facade.checkpointer.Checkpointer`'s
run, kept out of the facade module so it stays a thin list of the loop's calls: the
constructor's argument checks (:func:`check_arguments`), the run it builds (:func:`start_run`:
its :class:`RunContext` and :class:`RunState`) and ``close()`` (:func:`close_run`).
"""

from __future__ import annotations

import atexit
import logging
import os
import warnings
from typing import Any

import attrs

from statecraft.checkpoint.async_writes.role_slots import BackgroundWrites
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.config.plans import plan_warnings
from statecraft.checkpoint.facade.attempt_open import checked_output_root
from statecraft.checkpoint.facade.run_context import MachineShelf, RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.kernel.layout import RunIdentity, as_run_identity
from statecraft.checkpoint.retention.run import RetentionPlan
from statecraft.checkpoint.stop.termination import TerminationWatch
from statecraft.checkpoint.triggers import SaveTriggers
from statecraft.errors import ConfigError, ConfigIssue, NotSupportedYetError, TrackingError
from statecraft.logs import configure_default_output
from statecraft.parallel.collectives import Collective, default_collective
from statecraft.storage.filesystem import Filesystem

__all__ = ["check_arguments", "close_run", "start_run"]

log = logging.getLogger("statecraft")


def check_arguments(config: Any, *, quiet: Any, retention: Any) -> None:
    """Refuse the ``Checkpointer`` arguments of the wrong type.

    Raises:
        TrackingError: ``config`` is not a ``CheckpointConfig``.
        ConfigError: ``quiet`` is not ``True`` / ``False`` / ``None``; ``retention`` is not a
            ``RetentionPlan`` or ``None``, or is given together with a ``keep_optim_last`` /
            ``keep_model_last`` knob it would replace (naming both).
    """
    if not isinstance(config, CheckpointConfig):
        raise TrackingError(f"config must be a CheckpointConfig, got {type(config).__name__}")
    if quiet is not None and not isinstance(quiet, bool):
        raise ConfigError(
            [ConfigIssue("quiet", quiet, "True, False or None (None: the quiet knob)")],
            source="Checkpointer(quiet=...)",
        )
    if retention is not None and not isinstance(retention, RetentionPlan):
        raise ConfigError(
            [ConfigIssue("retention", type(retention).__name__, "a RetentionPlan or None")],
            source="Checkpointer(retention=...)",
        )
    if retention is not None:
        refuse_knobs_beside_plan(config, retention)


def refuse_knobs_beside_plan(config: CheckpointConfig, retention: RetentionPlan) -> None:
    """A ``retention=`` plan replaces the ``keep_optim_last`` / ``keep_model_last`` knobs, so
    giving both is a conflict, refused naming both (never a silent override).

    Raises:
        ConfigError: a ``keep_*_last`` knob is set (not its default) beside ``retention``.
    """
    given = [
        (knob, value)
        for knob, value, default in (
            ("keep_optim_last", config.keep_optim_last, None),
            ("keep_model_last", config.keep_model_last, 0),
        )
        if value != default
    ]
    if not given:
        return
    knobs = ", ".join(f"{knob}={'null' if v is None else v}" for knob, v in given)
    raise ConfigError(
        [
            ConfigIssue(
                knob,
                value,
                f"unset (its default) when Checkpointer(retention=...) is given: the plan "
                f"({retention.describe()}) replaces the keep_*_last knobs; drop {knobs} from "
                "the config, or drop retention= and let the knobs decide",
            )
            for knob, value in given
        ],
        source="Checkpointer(retention=...) and the keep_*_last knobs",
    )


def start_run(
    config: CheckpointConfig,
    *,
    run: RunIdentity | str,
    output_root: str | os.PathLike[str],
    collective: Collective | None,
    filesystem: Filesystem | None,
    quiet: bool | None,
    retention: RetentionPlan | None,
    save_triggers: Any = None,
) -> tuple[RunContext, RunState]:
    """The body of the ``Checkpointer`` constructor (which documents its arguments and
    errors): check the arguments, set up the default ``statecraft:`` output, log the config's
    warnings, and build the run's fixed context and its moving state. Nothing is written.

    Raises:
        what ``Checkpointer(...)`` raises.
    """
    check_arguments(config, quiet=quiet, retention=retention)
    triggers = SaveTriggers(save_triggers)  # refuses what is not a trigger
    collective = collective or default_collective()
    # First, so the config's own warnings below reach the user too (statecraft.logs).
    configure_default_output(rank=collective.rank, quiet=config.quiet if quiet is None else quiet)
    for warning in config.require_supported():
        log.warning(warning)
    root = checked_output_root(output_root)
    identity = as_run_identity(run)
    termination = TerminationWatch(config.termination, collective)
    machines = MachineShelf()
    machines.load("resume")  # loaded (and checked) now rather than at the first resume()
    if config.checkpoint_format == "dcp" and config.validation.save_checkpoint:
        # a durable validation writes through the consolidated save machine
        raise NotSupportedYetError(
            "validation.save_checkpoint",
            True,
            "with checkpoint_format=dcp set validation.save_checkpoint=false (validation "
            "then evaluates without a durable checkpoint of its own), or use "
            "checkpoint_format=consolidated",
        )
    if config.checkpoint_format == "incremental" and collective.world_size > 1:
        # the blob store is written by rank 0 alone; a sharded run writes DCP shards
        raise NotSupportedYetError(
            "checkpoint_format",
            "incremental",
            f"a run of {collective.world_size} ranks saves with checkpoint_format=dcp (or "
            "consolidated); the incremental format is single-process in this release",
        )
    plan = RetentionPlan.from_config(config) if retention is None else retention
    if config.upload.enabled and not plan.require_uploaded:
        # with an archive, retention prunes only what is archived (never the only copy)
        plan = attrs.evolve(plan, require_uploaded=True)
    context = RunContext(
        config=config,
        identity=identity,
        output_root=root,
        collective=collective,
        filesystem=filesystem,
        retention=plan,
        termination=termination,
        machines=machines,
        triggers=triggers,
    )
    machines.load("save")
    writes = BackgroundWrites(collective, enabled=config.save_async and not context.sharded)
    local = config.checkpoint_store.backend != "object_store"
    if context.sharded and config.save_async and config.save_async_dcp and local:
        from statecraft.checkpoint.save.dcp_async import DcpBackgroundWrites

        writes = DcpBackgroundWrites(collective)  # every rank writes its shards in background
    for line in plan_warnings(config):  # an active partial plan: not exact-resume capable
        warnings.warn(line, UserWarning, stacklevel=3)
    return context, RunState(writes=writes)


def close_run(context: RunContext, state: RunState) -> None:
    """The body of ``Checkpointer.close()`` (which documents it): join the background writes;
    then, whatever the join raised, restore the signal handlers, release the slots and the
    writer lease (and its release at exit). A second call does nothing."""
    if state.closed:
        return
    try:
        state.writes.join(state.saves)
    finally:
        context.termination.uninstall()
        state.writes.close()
        opened = state.opened
        lease = None if opened is None else opened.lease
        if opened is not None:
            state.opened = attrs.evolve(opened, lease=None)
        state.closed = True
        if opened is not None and opened.exit_release is not None:
            atexit.unregister(opened.exit_release)
        if lease is not None:
            lease.release()
