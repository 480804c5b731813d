"""All-or-nothing loading of a verified checkpoint into the live training objects.

Resume's ``load_checkpoint`` effect (:mod:`statecraft.checkpoint.resume.bindings`) calls
:func:`load_all_or_nothing`. The contract: either every tracked object holds the checkpoint's
state, or none changed.

1. **Read and check everything first.** Every component the plan model
   (:data:`~statecraft.checkpoint.kernel.plan.CHECKPOINT_PLAN`) loads is read
   (``weights_only=True``,
   through the writer; verification already parsed them, and those payloads are used) and
   checked against the live objects by the compatibility check
   (:func:`~statecraft.checkpoint.kernel.compatibility.check_fit`): the model's keys, tensor shapes
   and dtypes, the optimizer's class, parameter-group count and per-group sizes, a tracked
   optimizer without saved state; and the named stateful objects (``track(stateful=...)``)
   against the names the checkpoint saved: a name on one side only is refused. Any problem
   raises :class:`~statecraft.errors.ResumeError` naming the checkpoint, the first differences
   and the fix; no object was touched.
2. **Apply, with a rollback.** The cheap-to-snapshot objects are loaded first — data source
   (this rank's own entry of the per-rank ``data.pt``; none at another world size), the named
   stateful objects, scheduler, optimizer (its ``state_dict()`` holds references to tensors its
   ``load_state_dict`` replaces but never mutates), RNG streams — and the model last, because
   its ``load_state_dict`` copies into the live parameters and a copy of a large model is not
   cheap. Should an apply step still fail (a data source's own ``load_state_dict`` raising),
   every object already loaded is restored from its snapshot and the error is re-raised. The
   model cannot fail after step 1's strict key/shape check short of a bug in ``torch``.
3. The update clocks and the loop state (``Checkpointer.loop_state``, updated in place with a
   copy of the saved one) are set last.
"""

from __future__ import annotations

import copy
import io
import logging
from collections.abc import Callable

# Any: the tracked objects (user modules, optimizers, stateful objects) and the payloads read
# back are torch objects of no static type; what is loaded is checked against the manifest.
from typing import Any

import attrs
import torch

from statecraft.checkpoint.kernel.compatibility import (
    check_fit,
    check_world_size,
    model_state_problems,
    optimizer_state_problems,
)
from statecraft.checkpoint.kernel.copy_loading import check_copies, copy_steps
from statecraft.checkpoint.kernel.ema_entries import split_ema
from statecraft.checkpoint.kernel.identity_records import RESERVED_RECORDS
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN, COPY_ENTRIES, DCP_PLAN, PlanEntry
from statecraft.checkpoint.state import (
    DataState,
    TrainerState,
    capture_rng_state,
    restore_rank_rng,
    restore_rng_state,
)
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    ResumeError,
    StatecraftError,
)
from statecraft.writers.base import Writer
from statecraft.writers.dcp import load_dcp_state
from statecraft.writers.dcp_store_reader import StoreStorageReader

__all__ = [
    "PRISTINE_GROUPS",
    "Components",
    "dcp_optimizer_payload",
    "load_all_or_nothing",
    "model_state_problems",
    "optimizer_state_problems",
    "read_components",
    "read_dcp_components",
    "stateful_problems",
]

_NOTHING_CHANGED = "nothing was loaded: every tracked object is unchanged"
_TRACKED_AS = RESERVED_RECORDS


@attrs.frozen
class Components:
    """The payloads of one checkpoint, read before anything is loaded (``None``: absent).
    ``data`` is every rank's data state (a :class:`~statecraft.checkpoint.state.DataState`)."""

    model: Any
    optimizer: Any
    data: DataState | None
    dcp: bool = False  # loaded from DCP directories into scratch targets (applied by dcp_state)
    copies: dict[str, Any] = attrs.field(factory=dict)  # "old" / "ref" -> old.pt / ref.pt


def _read(chosen: Any, writer: Writer, entry: PlanEntry) -> Any:
    """``entry``'s payload: the one verification parsed (taken, so the checkpoint's mapping
    is not pinned after the load), else read through the writer."""
    if chosen.legacy_payload is not None:
        return chosen.legacy_payload.get(entry.tracked or entry.name)
    if entry.name not in (chosen.manifest.files if chosen.manifest else {}):
        return None
    parsed = getattr(chosen, "payloads", None)
    if parsed and entry.name in parsed:
        return parsed.pop(entry.name)
    return writer.read(chosen.store, chosen.path(entry.name), mmap=entry.mmap)


def read_components(chosen: Any, writer: Writer, *, read_data: bool) -> Components:
    """Read every component of ``chosen`` (a ``VerifiedCheckpoint``) that resume loads.

    Raises:
        CheckpointCorruptError: a file is not a loadable ``torch.save`` archive.
        TrainerStateError: ``data.pt`` is a per-rank payload that is malformed.
    """
    data_entry = CHECKPOINT_PLAN.for_tracked("data")
    raw_data = _read(chosen, writer, data_entry) if read_data else None
    copies = {n: _read(chosen, writer, CHECKPOINT_PLAN.for_tracked(n)) for n in COPY_ENTRIES}
    return Components(
        _read(chosen, writer, CHECKPOINT_PLAN.for_tracked("model")),
        _read(chosen, writer, CHECKPOINT_PLAN.for_tracked("optimizer")),
        None
        if raw_data is None
        else DataState.from_payload(raw_data, source=f"{chosen.location}/{data_entry.name}"),
        copies={n: p for n, p in copies.items() if p is not None},
    )


#: the one item of a pristine optimizer's ``optim/`` directory: its param-group options (no
#: ``params``), ``torch.save``-d into a uint8 tensor (DCP stores tensors; weights_only-loadable)
PRISTINE_GROUPS = "pristine_param_groups"


def dcp_optimizer_payload(save: Any) -> dict[str, Any]:
    """What ``optim/`` holds for one ``OptimizerSave``: its state dict, or for a pristine
    optimizer only :data:`PRISTINE_GROUPS` (the param-group options restore applies before it
    shapes the load target)."""
    if not save.pristine:
        return dict(save.state)
    buffer = io.BytesIO()
    torch.save([dict(g) for g in save.groups], buffer)
    return {PRISTINE_GROUPS: torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)}


def _pristine_groups(store: Any, path: str, location: str) -> tuple[dict[str, Any], ...]:
    """The param-group options a pristine optimizer was saved with (``optim/``).

    Raises:
        CheckpointCorruptError: ``optim/`` does not hold them.
    """
    metadata = StoreStorageReader(store, path).read_metadata()
    item = metadata.state_dict_metadata.get(PRISTINE_GROUPS)
    size = getattr(item, "size", None)
    if size is None:
        raise CheckpointCorruptError(
            f"{location}/optim",
            f"trainer.pt records a pristine optimizer but optim/ holds no {PRISTINE_GROUPS!r} "
            "tensor (its param-group options)",
            "Resume from another checkpoint.",
        )
    target = {PRISTINE_GROUPS: torch.empty(tuple(size), dtype=torch.uint8)}
    load_dcp_state(store, path, target)
    groups = torch.load(io.BytesIO(target[PRISTINE_GROUPS].numpy().tobytes()), weights_only=True)
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise CheckpointCorruptError(
            f"{location}/optim", f"{PRISTINE_GROUPS!r} is not a list of param-group options"
        )
    return tuple(groups)


def read_dcp_components(
    chosen: Any, tracked: Any, trainer: TrainerState, writer: Writer, *, read_data: bool
) -> Components:
    """Every rank: load ``chosen``'s DCP components into scratch targets shaped by the live
    objects (:mod:`statecraft.checkpoint.state.dcp_state`; DCP's load planner reshards when the
    world size changed). No live model or optimizer tensor changes here, with one exception
    the reference prescribes: a pristine optimizer is reset to never-stepped with the saved
    param-group options applied (before its target would be shaped); a rejected load leaves
    it so.

    Raises:
        CheckpointCorruptError: ``.metadata`` missing or unreadable, a shard missing, short
            or with other bytes than its item digests (naming the file).
        ResumeError: the checkpoint lacks a key the live objects need, or shapes differ.
    """
    from statecraft.checkpoint.state import dcp_state

    store = chosen.store

    def load(name: str, target: dict[str, Any]) -> None:
        try:
            load_dcp_state(store, chosen.path(name), target)
        except CheckpointCorruptError:
            raise
        except CheckpointError as exc:  # keys or shapes the live objects need are not there
            raise ResumeError(
                f"{chosen.location}/{name}: does not fit the tracked objects ({exc}). "
                f"{_NOTHING_CHANGED}. Track the same model and optimizer as the saving run, "
                "or start a new attempt (resume=off)",
                path=chosen.location,
            ) from None

    model = optim = None
    if tracked.model is not None:
        model = dcp_state.model_load_target(tracked.model)
        load("model", model)
    if tracked.optimizer is not None:
        if trainer.optimizer_pristine:
            groups = _pristine_groups(store, chosen.path("optim"), chosen.location)
            optim = dcp_state.optimizer_load_target(
                tracked.model, tracked.optimizer, pristine=True, groups=groups
            )
        else:
            optim = dcp_state.optimizer_load_target(
                tracked.model, tracked.optimizer, pristine=False, groups=()
            )
        if optim is not None:
            load("optim", optim)
    data_entry = DCP_PLAN.for_tracked("data")
    raw_data = _read(chosen, writer, data_entry) if read_data else None
    data = (
        None
        if raw_data is None
        else DataState.from_payload(raw_data, source=f"{chosen.location}/{data_entry.name}")
    )
    return Components(model, optim, data, dcp=True)


def _loader(obj: Any, state: Any) -> Callable[[], None]:
    """Load a copy of ``state`` into ``obj`` when called."""

    def load() -> None:
        obj.load_state_dict(copy.deepcopy(state))

    return load


def stateful_problems(tracked: Any, trainer: TrainerState) -> list[str]:
    """Named stateful objects on one side only: tracked but not saved, or saved but not
    tracked (each line names the object and the fix)."""
    live, saved = set(tracked.stateful), set(trainer.stateful)
    problems = [
        f"the stateful object {name!r} is tracked but the checkpoint saved no state for it "
        f"(it saved {sorted(saved) or 'none'}); track the same stateful objects as the saving "
        "run, or start fresh (resume=off) to begin it from its current state (init_from=<the "
        "checkpoint> starts a new run from its weights)"
        for name in sorted(live - saved)
    ]
    problems += [
        f"the checkpoint saved the stateful object {name!r} but this process does not track "
        f"it; pass {_TRACKED_AS.get(name, f'track(stateful={{{name!r}: ...}})')} so its state "
        "is restored (init_from=<the checkpoint> starts a new run from its weights)"
        for name in sorted(saved - live)
    ]
    return problems


def _check_stateful(tracked: Any, trainer: TrainerState, location: str) -> None:
    problems = stateful_problems(tracked, trainer)
    if problems:
        raise ResumeError(
            f"{location}: the named stateful objects do not match the checkpoint: "
            f"{'; '.join(problems)}. {_NOTHING_CHANGED}",
            path=location,
            problems=problems,
        )


def load_all_or_nothing(
    tracked: Any,
    trainer: TrainerState,
    parts: Components,
    *,
    location: str,
    rank: int,
    world_size: int,
    log: logging.Logger,
    restore_rng: Callable[..., Any] = restore_rank_rng,
) -> str:
    """Load ``parts`` and ``trainer`` into ``tracked`` (a ``Tracked``) so that either all of it
    lands or nothing changes (see the module docstring). This rank's entry of ``parts.data``
    is loaded when a data source is tracked and the checkpoint holds state saved at this world
    size. ``restore_rng`` restores this rank's
    streams (:func:`~statecraft.checkpoint.state.restore_rank_rng`; resume passes its own
    binding so a harness can swap it).

    Returns:
        the RNG restore status (``"restored"``, ``"missing"``, ``"topology_changed"``).

    Raises:
        ResumeError: a component does not fit its live object (nothing changed), or an apply
            step failed (every object already loaded was restored).
        TrainerStateError: the RNG inventory is malformed (every object restored).
    """
    if not parts.dcp:  # a DCP load already matched every key and shape against its target
        check_world_size(trainer, parts, world_size=world_size, location=location)
        check_fit(tracked, trainer, parts, location=location)
    _check_stateful(tracked, trainer, location)
    check_copies(tracked, trainer, parts, location=location)  # old.pt / ref.pt, the marker
    undo: list[Callable[[], None]] = []
    steps: list[tuple[str, Callable[[], Any]]] = []
    own = None if parts.data is None else parts.data.state_for(rank, world_size)
    if tracked.data is not None and own is not None:
        before_data = copy.deepcopy(tracked.data.state_dict())
        steps.append(("data source", lambda: tracked.data.load_state_dict(copy.deepcopy(own))))
        undo.append(lambda: tracked.data.load_state_dict(before_data))
    for name, obj in tracked.stateful.items():
        before = copy.deepcopy(obj.state_dict())
        steps.append((f"stateful object {name!r}", _loader(obj, trainer.stateful[name])))
        undo.append(_loader(obj, before))
    if tracked.scheduler is not None:
        before_sched = copy.deepcopy(tracked.scheduler.state_dict())
        steps.append(
            ("scheduler", lambda: tracked.scheduler.load_state_dict(trainer.scheduler_state))
        )
        undo.append(lambda: tracked.scheduler.load_state_dict(before_sched))
    if tracked.optimizer is not None and parts.dcp and parts.optimizer is not None:
        from statecraft.checkpoint.state import dcp_state

        before_dcp = copy.deepcopy(tracked.optimizer.state_dict())
        steps.append(
            (
                "optimizer",
                lambda: dcp_state.apply_optimizer_state(
                    tracked.model, tracked.optimizer, parts.optimizer
                ),
            )
        )
        undo.append(lambda: tracked.optimizer.load_state_dict(before_dcp))
    elif tracked.optimizer is not None and not parts.dcp:
        before_optim = tracked.optimizer.state_dict()  # references; load replaces, never mutates
        steps.append(("optimizer", lambda: tracked.optimizer.load_state_dict(parts.optimizer)))
        undo.append(lambda: tracked.optimizer.load_state_dict(before_optim))
    before_rng = capture_rng_state()
    rng_status: list[str] = []
    steps.append(
        (
            "RNG streams",
            lambda: rng_status.append(
                str(
                    restore_rng(
                        trainer.rng,
                        rank=rank,
                        world_size=world_size,
                        log=log,
                        resharded=parts.dcp,
                    )
                )
            ),
        )
    )
    undo.append(lambda: restore_rng_state(before_rng))
    copies_before, copies_after = copy_steps(tracked, parts)
    steps += copies_before
    if tracked.model is not None and parts.dcp:
        from statecraft.checkpoint.state import dcp_state

        steps.append(("model", lambda: dcp_state.apply_model_state(tracked.model, parts.model)))
    elif tracked.model is not None:
        model_state, ema_state = split_ema(parts.model)  # a maintained EMA's entries: its own
        ema = getattr(tracked, "ema", None)
        if ema is not None and ema_state is not None:
            before_ema = copy.deepcopy(ema.state_dict())
            steps.append(("EMA", lambda: ema.load_state_dict(ema_state)))
            undo.append(lambda: ema.load_state_dict(before_ema))
        steps.append(("model", lambda: tracked.model.load_state_dict(model_state)))
    steps += copies_after  # a copy derived from the policy: rebuilt from the loaded model
    for done, (what, apply) in enumerate(steps):
        try:
            apply()
        except Exception as exc:
            for restore in reversed(undo[: done + 1]):  # the failed step may be half-applied
                try:
                    restore()
                except Exception:  # keep the first error; say the restore did not succeed
                    log.exception("%s: restoring a tracked object after a failed load", location)
            if isinstance(exc, StatecraftError):
                raise
            raise ResumeError(
                f"{location}: loading the {what} failed ({type(exc).__name__}: {exc}); every "
                "tracked object loaded before it was restored, so nothing changed. Fix the "
                f"{what} (track the same objects as the saving run) or resume from another "
                "checkpoint",
                path=location,
                component=what,
            ) from exc
    tracked.clocks = trainer.to_clocks()
    tracked.loop_state.clear()
    tracked.loop_state.update(copy.deepcopy(trainer.extra))
    return rng_status[0] if rng_status else "fresh"
