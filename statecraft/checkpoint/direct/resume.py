"""Resume from a direct object-store primary (``checkpoint_store.backend=object_store``), on
every rank, through the ``resume`` machine (``machines/resume.toml``, the bindings of
:mod:`statecraft.checkpoint.resume.bindings`): the direct root is a store plus a plan
(:class:`~statecraft.checkpoint.direct.resume_source.DirectResumeSource`) the machine runs
over, so the direct resume takes the same transitions as a local one and
``statecraft crashcheck --machine resume`` crashes it too.

- ``resume=auto``: the iteration latest names in the root (none: a fresh start; one that does
  not verify: refused with its error, never trained over);
- ``resume=s3://bucket/prefix/iter_N``: that iteration, a copied tree included (every path in
  a manifest is relative); it must verify;
- ``resume=off``: a fresh start into the root.

Order (the table's; nothing is loaded into a tracked object before every check passed): rank
0 picks and verifies the iteration (the manifest, every object it names HEADed, the control
files' digests: :mod:`~statecraft.checkpoint.direct.reading`) and every rank learns the
outcome; every rank reads the DCP components in place; everything lands all or nothing
(:func:`~statecraft.checkpoint.kernel.loading.load_all_or_nothing`).

::

    result = load_direct_checkpoint(tracked, root.store, collective=c, location=root.uri)
    result.step     # the resumed iteration (0: the root holds no latest -> fresh start)

    ckpt.resume()   # Checkpointer with backend=object_store: the facade -> resume_direct(...)

Failure modes (nothing is loaded): ``ResumeError`` (an explicit ``s3://`` path holds no
manifest, a component does not fit), ``CheckpointCorruptError`` (a malformed manifest or
latest, a missing ``.metadata``, a missing generation or object, a truncated or bit-flipped
shard named with its item, a control file of another digest), ``ObjectRequestError`` (the
bucket did not answer; wrong credentials are refused when the root is opened).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs

from statecraft.checkpoint.direct.explicit_root import open_explicit_root
from statecraft.checkpoint.direct.reading import DirectCheckpoint, read_direct_checkpoint
from statecraft.checkpoint.direct.resume_source import DirectResumeSource
from statecraft.checkpoint.direct.root_lease import ObjectRootLease
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.resume.records import ResumeContext, ResumeResult
from statecraft.engine import Machine
from statecraft.errors import CheckpointError
from statecraft.parallel.collectives import Collective
from statecraft.parallel.coordinated import rank_zero_effects
from statecraft.parallel.rank0 import on_rank_zero
from statecraft.storage.base import Store

if TYPE_CHECKING:
    from statecraft.checkpoint.config.schema import CheckpointConfig
    from statecraft.checkpoint.direct.root import DirectRoot
    from statecraft.checkpoint.fencing.object_lease_handle import ObjectStoreLease
    from statecraft.checkpoint.kernel.layout import RunAttempt, RunIdentity

__all__ = [
    "DirectCheckpoint",
    "DirectResume",
    "ObjectRootLease",
    "load_direct_checkpoint",
    "open_explicit_root",
    "read_direct_checkpoint",
    "refuse_local_only_features",
    "resume_direct",
    "run_direct_resume",
]

log = logging.getLogger("statecraft")


def run_direct_resume(
    tracked: Any,
    source: DirectResumeSource,
    *,
    mode: str,
    collective: Collective,
    cursor_resume: str = "strict",
    machine: Machine | None = None,
) -> ResumeResult:
    """Run the ``resume`` machine over ``source`` on every rank (coordinator effects on rank 0,
    their outcome broadcast).

    Args:
        mode: ``"auto"``, ``"off"``, or anything else: the explicit iteration of ``source``.
        cursor_resume: ``data.cursor_resume`` (``off``: the data source is not restored).
        machine: the resume machine (default: the shipped one; the crash harness swaps in
            deliberately broken ones).

    Raises:
        see the module docstring.
    """
    kind = mode if mode in ("auto", "off") else "explicit"
    ctx = ResumeContext(
        mode=kind,
        tracked=tracked,
        explicit=(
            source.iteration_uri(source.iteration)
            if kind == "explicit" and source.iteration is not None
            else None
        ),
        cursor_resume=cursor_resume,
        collective=collective,
        source=source,
        fresh_reason=f"resume=off: starting fresh into {source.location}" if kind == "off" else "",
    )
    machine = machine if machine is not None else shipped_machine("resume")
    machine.run(ctx, call=rank_zero_effects(collective, machine.bindings.roles)).raise_for_failure()
    if ctx.result is None:  # pragma: no cover - every terminal path sets it
        raise CheckpointError(f"{source.location}: the resume machine ended without a result")
    return ctx.result


def load_direct_checkpoint(
    tracked: Any,
    store: Store,
    *,
    collective: Collective,
    location: str,
    iteration: int | None = None,
    cursor_resume: str = "strict",
) -> ResumeResult:
    """Resume ``tracked`` from the direct root ``store`` (every rank calls it).

    Args:
        store: the root (``s3://<bucket>/<prefix>``, the checkpoints prefix).
        location: the root's URI, for messages and the result.
        iteration: an explicit ``iter_N`` (``resume=s3://.../iter_N``); ``None``: latest
            (absent: a fresh start, ``step == 0``).
        cursor_resume: ``data.cursor_resume`` (``off``: the data source is not restored).

    Raises:
        see the module docstring.
    """
    source = DirectResumeSource(store, location, iteration)
    return run_direct_resume(
        tracked,
        source,
        mode="auto" if iteration is None else "explicit",
        collective=collective,
        cursor_resume=cursor_resume,
    )


def refuse_local_only_features(config: Any) -> None:
    """Refuse, before anything is created, the knobs whose writes exist only for a local
    primary: a durable validation checkpoint (``validation.save_checkpoint=true``) and partial
    artifacts (a partial ``checkpoint_components`` plan). Under the direct primary they would
    write a local checkpoint beside the bucket's.

    Raises:
        NotSupportedYetError: naming the knob and the fix.
    """
    from statecraft.errors import NotSupportedYetError

    if config.validation.save_checkpoint:
        raise NotSupportedYetError(
            "validation.save_checkpoint",
            True,
            "with checkpoint_store.backend=object_store set validation.save_checkpoint=false "
            "(durable validation checkpoints are written to a local primary only; ephemeral "
            "validation with validation.every still runs)",
        )
    if not config.is_full_plan:
        raise NotSupportedYetError(
            "checkpoint_components",
            list(config.checkpoint_components),
            "with checkpoint_store.backend=object_store keep the full plan (partial artifacts "
            "are written to a local primary only)",
        )


@attrs.frozen
class DirectResume:
    """What :func:`resume_direct` leaves for the facade to hold: the resume's result, the
    opened root and rank 0's lease on it (``None`` on the other ranks)."""

    result: ResumeResult
    root: DirectRoot
    lease: ObjectStoreLease | None


def resume_direct(
    config: CheckpointConfig,
    *,
    attempt: RunAttempt,
    run: RunIdentity,
    tracked: Any,
    collective: Collective,
) -> DirectResume:
    """``Checkpointer.resume()`` under ``checkpoint_store.backend=object_store`` (every rank,
    after :func:`refuse_local_only_features` and with the local attempt open: its run
    directory, resolved config, RUN_TS and the local writer lease stay under the output
    root): open the direct root (wrong credentials, an unknown bucket or a dead endpoint fail
    here, nothing written), take its object-store lease on rank 0 (a live owner refuses,
    named), then load latest of the root (``resume=auto``), nothing (``resume=off``: a fresh
    start) or the explicit ``resume=s3://.../iter_N``. The facade then saves into the returned root.

    Raises:
        WriterLeaseError: another job holds the root's lease (named); nothing was loaded.
        and what :func:`run_direct_resume` raises.
    """
    from statecraft.checkpoint.direct.root import open_direct_root
    from statecraft.checkpoint.fencing.object_lease import acquire_object_lease

    store_config = config.checkpoint_store
    root = open_direct_root(store_config, attempt, run=run)

    held: list[ObjectStoreLease] = []  # rank 0 holds it; its outcome (an error) reaches all

    def take() -> None:
        held.append(
            acquire_object_lease(
                root.store, ttl_s=store_config.lease_ttl_s, takeover=store_config.lease_takeover
            )
        )

    on_rank_zero(collective, take)
    mode = config.resume
    if mode in ("off", "auto"):
        source = DirectResumeSource(root.store, root.uri)
    else:
        store, uri, iteration = open_explicit_root(root, mode, config=store_config, attempt=attempt)
        source = DirectResumeSource(store, uri, iteration)
    result = run_direct_resume(
        tracked,
        source,
        mode=mode,
        collective=collective,
        cursor_resume=config.data.cursor_resume,
    )
    return DirectResume(result=result, root=root, lease=held[0] if held else None)
