"""What ``Checkpointer.resume()`` runs under ``checkpoint_store.backend=object_store``: open the
local attempt (run directory, resolved config, RUN_TS and the local writer lease stay under the
output root), resume from the direct root through the resume machine
(:func:`statecraft.checkpoint.direct.resume.resume_direct`), then hold what the later saves need
in the run state: the root, rank 0's lease on it (renewed at each ``step_end``), and the
attempt's lease wrapped so that ``close()`` releases both.

The termination watch's handlers are installed only after the resume succeeded, as on the local
path (:mod:`statecraft.checkpoint.facade.resume_run`).
"""

from __future__ import annotations

from typing import cast

import attrs

from statecraft.checkpoint.direct.resume import (
    ObjectRootLease,
    refuse_local_only_features,
    resume_direct,
)
from statecraft.checkpoint.facade.attempt_open import ensure_attempt
from statecraft.checkpoint.facade.run_context import RunContext
from statecraft.checkpoint.facade.run_state import RunState
from statecraft.checkpoint.facade.tracking import init_on_start
from statecraft.checkpoint.fencing.lease import WriterLease
from statecraft.checkpoint.resume.records import ResumeResult

__all__ = ["run_direct_resume_in_attempt"]


def run_direct_resume_in_attempt(context: RunContext, state: RunState) -> ResumeResult:
    """Resume a ``backend=object_store`` run (every rank; the tracked objects are registered).

    Raises:
        NotSupportedYetError: a feature written to a local primary only is configured (named,
            with the fix); nothing was created.
        and what :func:`~statecraft.checkpoint.direct.resume.resume_direct` raises; nothing was
        loaded then, and the attempt's lease is not wrapped.
    """
    refuse_local_only_features(context.config)  # before anything local is created
    opened = ensure_attempt(context, state)
    direct = resume_direct(
        context.config,
        attempt=opened.attempt,
        run=context.identity,
        tracked=state.tracked,
        collective=context.collective,
    )
    state.direct_root = direct.root
    state.direct_lease = direct.lease
    if direct.lease is not None and opened.lease is not None:
        # ObjectRootLease offers the WriterLease calls the facade makes (where, check,
        # release) over both leases
        both = cast(WriterLease, ObjectRootLease(opened.lease, direct.lease))
        state.opened = attrs.evolve(opened, lease=both)
    result = direct.result
    init_on_start(context, state, result)
    state.last_saved_step = result.step if result.source is not None else None
    if context.config.termination.enabled:
        context.termination.install()
    return result
