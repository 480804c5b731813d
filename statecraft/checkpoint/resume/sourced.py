"""The ``resume`` machine's coordinator steps over a :class:`~.source.CheckpointSource` (the
direct object-store root), called by :mod:`statecraft.checkpoint.resume.bindings` when the
context names one. The table is the same as for a local attempt; only where candidates come
from and how one is verified differ:

- candidates: what the source lists (the direct root: the iteration latest names);
- a candidate that fails verification is passed over with its reason, and its error is kept
  (rank 0): the source then decides whether a fresh start is allowed
  (:meth:`~.source.CheckpointSource.fresh_refusal`; the direct root refuses it with that very
  error, so a damaged latest is never silently trained over);
- an explicit iteration must verify (no fallback).

Nothing here writes.
"""

from __future__ import annotations

import logging

from statecraft.checkpoint.kernel.catalog import PassedOver
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.validation_records import ValidationStage
from statecraft.checkpoint.resume.records import ResumeContext
from statecraft.checkpoint.resume.source import CheckpointSource
from statecraft.errors import ResumeError

__all__ = [
    "list_source_candidates",
    "refuse_source_fresh_start",
    "verify_source_candidate",
    "verify_source_explicit",
]

log = logging.getLogger("statecraft.resume")


def _source(ctx: ResumeContext) -> CheckpointSource:
    if ctx.source is None:
        raise ResumeError("a source step of the resume machine ran without a source")
    return ctx.source


def list_source_candidates(ctx: ResumeContext) -> None:
    """The source's candidates, newest first; none: the fresh start's reason."""
    source = _source(ctx)
    ctx.candidates = list(source.candidates())
    if not ctx.candidates:
        ctx.fresh_reason = source.no_candidate_reason()


def verify_source_candidate(ctx: ResumeContext, iteration: int) -> None:
    """Verify candidate ``iteration``; on failure pass it over with the reason and keep the
    error for :func:`refuse_source_fresh_start`.

    Raises:
        what the source's ``verify`` raises (the table moves to the next candidate).
    """
    source = _source(ctx)
    try:
        chosen = source.verify(iteration, explicit=False)
    except Exception as exc:
        name = iter_dirname(iteration)
        ctx.candidate_errors[iteration] = exc
        ctx.passed_over.append(PassedOver(name, str(exc)))
        log.warning("resume=auto passed over %s/%s: %s", source.location, name, exc)
        if not ctx.candidates:
            ctx.fresh_reason = (
                f"resume=auto found no checkpoint of {source.location} that verifies "
                f"({len(ctx.passed_over)} passed over)"
            )
        raise
    ctx.chosen = chosen
    ctx.chosen_stage = ValidationStage.NONE
    ctx.chosen_metrics = None


def verify_source_explicit(ctx: ResumeContext) -> None:
    """Verify the iteration ``resume=<path>`` names; any problem fails the resume.

    Raises:
        ResumeError: the source names no explicit iteration, or it is not committed.
        and what the source's ``verify`` raises.
    """
    source = _source(ctx)
    iteration = source.explicit_iteration
    if iteration is None:
        raise ResumeError(f"resume={ctx.explicit}: {source.location} names no iteration")
    ctx.chosen = source.verify(iteration, explicit=True)
    ctx.chosen_stage = ValidationStage.NONE
    ctx.chosen_metrics = None


def refuse_source_fresh_start(ctx: ResumeContext) -> None:
    """Every candidate failed (or there was none): raise the source's refusal, if any.

    Raises:
        the refusal (the direct root: the error of the iteration latest names).
    """
    refusal = _source(ctx).fresh_refusal(dict(ctx.candidate_errors))
    if refusal is not None:
        raise refusal
