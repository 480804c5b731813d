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
thin list of the loop's calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from statecraft.checkpoint.facade.attempt_open import resume_artifacts
from statecraft.checkpoint.facade.lifecycle import complete_adopted_attempt
from statecraft.checkpoint.facade.stopping import previous_window
from statecraft.checkpoint.facade.validation_resume import after_resume, identity_hint
from statecraft.checkpoint.resume.bindings import ResumeContext, ResumeResult
from statecraft.errors import CheckpointError, ValidationIdentityError
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.writers import ConsolidatedWriter, DcpWriter

if TYPE_CHECKING:  # the facade imports this module
    from statecraft.checkpoint.facade.checkpointer import Checkpointer

__all__ = ["run_resume"]


def run_resume(ckpt: Checkpointer) -> ResumeResult:
    """Resume ``ckpt`` (the body of :meth:`Checkpointer.resume`, which documents it).

    Raises:
        what :meth:`Checkpointer.resume` raises.
    """
    ckpt._require_tracked("resume")
    if ckpt.config.checkpoint_store.backend == "object_store":
        # the direct object-store primary resumes through its own code (h4's direct/resume.py)
        from statecraft.checkpoint.direct.resume import (  # type: ignore[import-not-found,unused-ignore]
            resume_direct,
        )

        direct: ResumeResult = resume_direct(ckpt)
        return direct
    ckpt._lifecycle.before_resume(
        ckpt.attempt.run_dir if ckpt.attempt else ckpt.run.job_dir(Path(ckpt.output_root))
    )
    mode = ckpt.config.resume
    kind = mode if mode in ("auto", "off") else "explicit"
    # An explicit source is loaded before an attempt is minted: a bad path must not leave
    # an empty attempt that resume=auto would adopt next time.
    store = ckpt._ensure_attempt() if kind != "explicit" else None
    previous_window(ckpt)
    attempt = ckpt.attempt
    adopted = None if attempt is None or attempt.minted else store
    boundaries = ckpt._boundaries
    ctx = ResumeContext(
        mode=kind,
        tracked=ckpt.tracked,
        store=adopted,
        explicit=mode if kind == "explicit" else None,
        verify_level=ckpt.config.verify,
        cursor_resume=ckpt.config.data.cursor_resume,
        collective=ckpt.collective,
        filesystem=ckpt.filesystem,
        artifacts=resume_artifacts(ckpt),
        validation_identity=boundaries.identity,
        # a DCP run verifies and loads DCP checkpoints (model/ and optim/ directories)
        writer=DcpWriter() if ckpt.config.checkpoint_format == "dcp" else ConsolidatedWriter(),
    )
    machine = ckpt._resume_machine
    try:
        ckpt.last_resume_run = machine.run(
            ctx, call=rank_zero_effects(ckpt.collective, machine.bindings.roles)
        ).raise_for_failure()
    except ValidationIdentityError as exc:  # name the missing validate_with, if it is that
        identity_hint(boundaries, exc)
        raise
    if kind == "explicit":
        ckpt._ensure_attempt()
    result = ctx.result
    if result is None:  # pragma: no cover - every terminal path sets it
        raise CheckpointError("resume machine ended without a result")
    if ctx.store is not None:  # an adopted attempt: complete its pointer, sweep leftovers
        complete_adopted_attempt(
            ckpt.collective, ctx.store, result, machine=ckpt._save, lease=ckpt.lease
        )
    ckpt.last_saved_step = result.step if result.resumed else None
    ckpt._lifecycle.after_resume(result, ckpt.attempt)
    result, ckpt.last_validated_step = after_resume(
        boundaries, ckpt.config, result, ctx.store, lease=ckpt.lease
    )
    # Last, once the resume succeeded: a resume that raises leaves no flag-only handler
    # behind (nothing would ever poll it, and SIGTERM would be swallowed).
    if ckpt.config.termination.enabled:
        ckpt.termination.install()  # main thread only (elsewhere: one WARNING, no handler)
    return result
