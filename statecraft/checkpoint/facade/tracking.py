"""What ``Checkpointer.track`` accepts: objects with ``state_dict`` / ``load_state_dict``, and
named stateful objects under plain identifier names that do not clash with the built-in parts
of a checkpoint.

Raises :class:`~statecraft.errors.TrackingError` naming the argument and the fix.
"""

from __future__ import annotations

import warnings
from typing import Any

from statecraft.errors import TrackingError

__all__ = [
    "BUILT_IN_NAMES",
    "init_on_start",
    "record_outcome",
    "refresh_copies",
    "register",
    "register_copies",
    "require_stateful",
    "stateful_objects",
]

#: names a named stateful object may not take (the checkpoint's own parts; ``model_roles``:
#: the identity of the model's copies, :mod:`statecraft.checkpoint.init_from.roles`)
BUILT_IN_NAMES = frozenset(
    {"model", "optimizer", "scheduler", "data", "loop_state", "rng", "model_roles"}
)


def require_stateful(name: str, obj: Any) -> None:
    """Refuse ``obj`` unless it has callable ``state_dict`` and ``load_state_dict``."""
    missing = [m for m in ("state_dict", "load_state_dict") if not callable(getattr(obj, m, None))]
    if missing:
        raise TrackingError(
            f"track({name}=...): {type(obj).__name__} has no {' / '.join(missing)}; register an "
            "object with state_dict() and load_state_dict() (a module, optimizer, scheduler or "
            "your own data source class)"
        )


def _cursorless_iterable(data: Any) -> bool:
    """A data source with neither ``state_dict`` nor ``load_state_dict`` that iterates (a plain
    ``DataLoader``, an ``IterableDataset``): tracked without a cursor (docs/checkpointing.md,
    "Data"); one with only one of the two is a mistake and refused."""
    has = [callable(getattr(data, m, None)) for m in ("state_dict", "load_state_dict")]
    return not any(has) and callable(getattr(data, "__iter__", None))


def stateful_objects(stateful: Any) -> dict[str, Any]:
    """``track(stateful=...)`` checked: a dict of identifier names to stateful objects."""
    if stateful is None:
        return {}
    if not isinstance(stateful, dict):
        raise TrackingError(
            f"track(stateful=...) expects a dict of name -> object; got {type(stateful).__name__}"
        )
    for name, obj in stateful.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise TrackingError(
                f"track(stateful=...): the name {name!r} is not a plain identifier; name each "
                "object like a variable (stateful={'scaler': scaler})"
            )
        if name in BUILT_IN_NAMES:
            raise TrackingError(
                f"track(stateful=...): the name {name!r} clashes with a built-in part of the "
                f"checkpoint ({', '.join(sorted(BUILT_IN_NAMES))}); pass that object by its own "
                "keyword or choose another name"
            )
        require_stateful(f"stateful[{name!r}]", obj)
    return dict(stateful)


def register(
    tracked: Any,
    *,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    data: Any,
    scheduler_identity: Any,
    stateful: dict[str, Any] | None,
    data_identity: Any = None,
) -> None:
    """Check and set what ``Checkpointer.track`` registers on ``tracked`` (all or nothing).

    Raises:
        TrackingError: as ``Checkpointer.track`` documents.
    """
    from statecraft.checkpoint.data import DataIdentity
    from statecraft.checkpoint.state import SchedulerIdentity

    for name, obj in (("model", model), ("optimizer", optimizer)):
        require_stateful(name, obj)
    if scheduler is not None:
        require_stateful("scheduler", scheduler)
    if data is not None and not _cursorless_iterable(data):
        require_stateful("data", data)
    if data_identity is not None and not isinstance(data_identity, DataIdentity):
        raise TrackingError(
            f"track(data_identity=...) must be a statecraft.checkpoint.data.DataIdentity; got "
            f"{type(data_identity).__name__}"
        )
    if scheduler_identity is not None and not isinstance(scheduler_identity, SchedulerIdentity):
        raise TrackingError("scheduler_identity must be a SchedulerIdentity")
    named = stateful_objects(stateful)
    tracked.model = model
    tracked.optimizer = optimizer
    tracked.scheduler = scheduler
    tracked.data = data
    tracked.data_identity = data_identity
    tracked.scheduler_identity = scheduler_identity
    tracked.stateful = named


def register_copies(context: Any, state: Any, **copies: Any) -> None:
    """Check and set the model's copies (``track(reference=..., old=..., ema=...)``;
    ``copies``: the keywords of ``ModelCopies.of``) on ``state`` (a ``RunState``; after
    :func:`register`): a tracked copy or maintained EMA adds the identity record as the reserved
    stateful object ``model_roles`` (saved in ``trainer.pt``, compared on resume); a moving copy
    is what ``old.pt`` / ``ref.pt`` hold; a maintained EMA is saved in ``model.pt``
    (``tracked.ema``). An EMA with ``ema_updates=False`` is neither: rank 0 warns once, here.

    Raises:
        TrackingError: as ``ModelCopies.of``.
        NotSupportedYetError: a moving copy or a maintained EMA under
            a format other than ``consolidated`` (or the object-store primary): not built yet.
    """
    from statecraft.checkpoint.init_from import IDENTITY_NAME, ModelCopies
    from statecraft.errors import NotSupportedYetError

    reference = copies.pop("reference", None)
    made = ModelCopies.of(
        reference,
        copies.pop("reference_update_every", 0),
        model=state.tracked.model,
        **copies,
    )
    config = context.config
    if made.moving() and config.checkpoint_format != "consolidated":
        raise NotSupportedYetError(
            "checkpoint_format",
            config.checkpoint_format,
            "a moving old policy or moving reference is saved to old.pt / ref.pt by the "
            "consolidated format only (DCP old/ and ref/ directories and incremental blobs of "
            "the copies are not built yet): use checkpoint_format=consolidated",
        )
    if made.maintained_ema is not None and config.checkpoint_format != "consolidated":
        raise NotSupportedYetError(
            "track(ema=...) with checkpoint_format",
            config.checkpoint_format,
            "a maintained EMA is saved in model.pt (consolidated format) only; use "
            "checkpoint_format=consolidated",
        )
    if made.maintained_ema is not None and config.checkpoint_store.backend != "local":
        raise NotSupportedYetError(
            "track(ema=...) with checkpoint_store.backend",
            config.checkpoint_store.backend,
            "a maintained EMA is saved by the local primary only (upload archives it)",
        )
    ema = made.ema
    if ema is not None and made.maintained_ema is None and context.collective.rank == 0:
        warnings.warn(
            f"track(ema=..., ema_updates=False): statecraft does not advance this "
            f"{type(ema).__name__}, so it is not saved in model.pt, not restored on resume and "
            "not initialized by init_from (a permanently stale EMA is never published); pass "
            "ema_updates=True to have record(Outcome.APPLIED) maintain it",
            UserWarning,
            stacklevel=3,
        )
    tracked = state.tracked
    state.copies = made
    tracked.copies = made if made.tracked else None
    tracked.old = None if made.old is None else made.old.module
    tracked.ref = None if made.moving_reference is None else made.moving_reference.module
    tracked.ema = made.maintained_ema
    if made.tracked:
        tracked.stateful[IDENTITY_NAME] = made.identity()


def refresh_copies(state: Any) -> None:
    """At a boundary: refresh the moving copies due after the last applied update
    (``ModelCopies.refresh_due``)."""
    if state.tracked.model is not None:
        state.copies.refresh_due(state.tracked.model, state.step)


def record_outcome(state: Any, outcome: Any) -> None:
    """``Checkpointer.record``: advance the update clocks by ``outcome``; an applied update
    also advances a maintained EMA once (:func:`statecraft.checkpoint.init_from.ema.advance`).

    Raises:
        TrackingError: the loop updated the EMA itself (nothing changed).
    """
    from statecraft.checkpoint.init_from.ema import advance

    copies, tracked = state.copies, state.tracked
    if tracked.ema is None:
        tracked.clocks.record(outcome)
        return
    copies.ema_offset = advance(
        tracked.ema, tracked.model, tracked.clocks, outcome, copies.ema_offset
    )


def init_on_start(context: Any, state: Any, result: Any) -> None:
    """After the resume machine (every rank): ``init_from`` for this start
    (:func:`statecraft.checkpoint.init_from.start.apply_on_start`: a fresh start's model and
    frozen reference, a resumed one's frozen reference only)."""
    from statecraft.checkpoint.init_from import apply_on_start

    state.copies.seen_step = state.step  # a resumed step's refreshes were done before its save
    state.init_report = apply_on_start(
        context.config,
        state.tracked.model,
        state.copies,
        resumed=result.resumed,
        output_root=context.output_root,
        collective=context.collective,
    )
