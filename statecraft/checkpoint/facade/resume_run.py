"""What ``Checkpointer.resume()`` runs: the resume machine (``machines/resume.toml``) for the
facade's tracked objects, then completing an adopted attempt and the validation stage it left
pending (:mod:`statecraft.checkpoint.facade.validation_resume`).

It also installs the termination watch's signal handlers once the resume succeeded (here, so
after torch.distributed, Lightning or Ray installed theirs; ``finalize()`` and ``close()``
restore them; a resume that raises installs none) and, in an adopted attempt,
logs how the previous window ended (its ``DONE.json``; sentinels older than it are stale:
:func:`~statecraft.checkpoint.facade.stopping.previous_window`). ``DONE.json`` never changes what
is adopted.

Kept apart from the facade (:mod:`statecraft.checkpoint.facade.checkpointer`) so the facade stays a
thin list of the loop's calls. ``backend=object_store`` resumes through the direct code
instead (``statecraft.checkpoint.direct.resume.resume_direct``, called by the facade).
"""

from __future__ import annotations

from statecraft.checkpoint.facade.attempt_open import ensure_attempt, resume_artifacts
from statecraft.checkpoint.facade.boundary_run import BoundaryRunner
from statecraft.checkpoint.facade.lifecycle import complete_adopted_attempt
from statecraft.checkpoint.facade.run_context import RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.stopping import previous_window
from statecraft.checkpoint.facade.tracking import init_on_start
from statecraft.checkpoint.facade.validation_resume import after_resume, identity_hint
from statecraft.checkpoint.resume.bindings import ResumeContext, ResumeResult
from statecraft.errors import CheckpointError, ValidationIdentityError
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.writers import ConsolidatedWriter, DcpWriter, Writer
from statecraft.writers.incremental import IncrementalWriter

__all__ = ["run_resume"]


def run_resume(context: RunContext, state: RunState, runner: BoundaryRunner) -> ResumeResult:
    """Resume the run into its local attempt (the body of :meth:`Checkpointer.resume`, which
    documents it; the tracked objects are registered).

    Raises:
        what :meth:`Checkpointer.resume` raises.
    """
    config = context.config
    state.lifecycle.before_resume(
        state.opened.attempt.run_dir if state.opened is not None else context.job_dir
    )
    mode = config.resume
    kind = mode if mode in ("auto", "off") else "explicit"
    # An explicit source is loaded before an attempt is minted: a bad path must not leave
    # an empty attempt that resume=auto would adopt next time.
    # resume=auto verifies its candidates while rank 0's lease record is published on a
    # thread; require_admissible waits for it before anything loads (ctx.before_load)
    overlap = kind == "auto"
    local = ensure_attempt(context, state, overlap_lease=overlap) if kind != "explicit" else None
    previous_window(context, state.opened)
    adopted = None if local is None or local.attempt.minted else local.store
    lease = None if local is None else local.lease
    ctx = ResumeContext(
        mode=kind,
        tracked=state.tracked,
        store=adopted,
        explicit=mode if kind == "explicit" else None,
        verify_level=config.verify,
        cursor_resume=config.data.cursor_resume,
        collective=context.collective,
        filesystem=context.filesystem,
        artifacts=resume_artifacts(context, state.opened),
        validation_identity=state.identity,
        # a DCP run verifies and loads DCP checkpoints (model/ and optim/ directories)
        writer=_writer(context),
        before_load=None if lease is None else lease.publish,
    )
    machine = context.machines.load("resume")
    try:
        state.last_resume_run = machine.run(
            ctx, call=rank_zero_effects(context.collective, machine.bindings.roles)
        ).raise_for_failure()
    except ValidationIdentityError as exc:  # name the missing validate_with, if it is that
        identity_hint(state.evaluation, exc)
        raise
    opened = ensure_attempt(context, state)  # an explicit source's attempt opens only now
    if overlap:  # the lease record is durable before anything below writes (a fresh start
        # never reached require_admissible; every rank raises rank 0's publication error)
        on_rank_zero(context.collective, lambda: lease.publish() if lease is not None else None)
    result = ctx.result
    if result is None:  # pragma: no cover - every terminal path sets it
        raise CheckpointError("resume machine ended without a result")
    if ctx.store is not None:  # an adopted attempt: complete its pointer, sweep leftovers
        complete_adopted_attempt(
            context.collective,
            ctx.store,
            result,
            machine=context.machines.load("save"),
            lease=opened.lease,
        )
    init_on_start(context, state, result)  # before any evaluation sees the model
    state.last_saved_step = result.step if result.resumed else None
    state.lifecycle.after_resume(result, opened.attempt)
    result, state.last_validated_step = after_resume(context, state, runner, result, ctx.store)
    # Last, once the resume succeeded: a resume that raises leaves no flag-only handler
    # behind (nothing would ever poll it, and SIGTERM would be swallowed).
    if config.termination.enabled:
        context.termination.install()  # main thread only (elsewhere: one WARNING, no handler)
    return result


def _writer(context: RunContext) -> Writer:
    """The writer that verifies and loads this run's checkpoints: DCP directories, blob-backed
    component files (``checkpoint_format=incremental``) or ``torch.save`` files."""
    if context.sharded:
        return DcpWriter()
    if context.config.checkpoint_format == "incremental":
        return IncrementalWriter()
    return ConsolidatedWriter()
