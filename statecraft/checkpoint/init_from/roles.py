"""The model's copies a run keeps beside it (``Checkpointer.track(reference=..., old=...,
ema=...)``), and the versioned identity of how they are kept, recorded in every checkpoint.

A **frozen reference** (``reference_update_every=0``, the default) is never saved: the loop
builds it before ``resume()`` on every start (a copy of the freshly built model), and
``init_from`` (when set) loads the base weights into it on every start, resumed windows
included (:mod:`statecraft.checkpoint.init_from.start`). The resume load never touches it, so
the anchor is the base weights exactly, whichever window the run is in. A **moving
reference** (``reference_update_every=N > 0``) and a **moving old policy** (``old=``,
``old_update_every=N``) are training state (:mod:`statecraft.checkpoint.init_from.moving`):
``ref.pt`` / ``old.pt``, refreshed from the policy after applied updates at their cadence.

:class:`RolesIdentity` is saved as the reserved stateful object ``model_roles`` (rank 0's
``trainer.pt``, so it goes through the save's one commit path and the crash harness's
coverage of ``trainer.pt``): version 2 is ``{"version": 2, "reference": "none" | "frozen" |
"moving", "reference_update_every": N, "old": "none" | "moving", "old_update_every": N,
"reference_refreshed_at": s | None, "old_refreshed_at": s | None, "old_storage": marker |
None, "ema": {"mode": "disabled"} | {"mode": "enabled", ...}}``
(:func:`~statecraft.checkpoint.init_from.ema.ema_identity`); version 1 (no old policy, no
moving reference, no EMA: ``{"mode": "disabled"}``) is read as before, and a checkpoint
without the record as no copies. Exact resume compares it with this run's before any
component is read (:meth:`RolesIdentity.check_saved`): a changed cadence, a copy or a
maintained EMA added or dropped, a changed EMA averaging or decay, or an unknown version fails
closed (nothing loaded), naming ``init_from`` as the way to start a new run from those weights.

A **maintained EMA** (:mod:`.ema`) is saved with the weights in ``model.pt`` and advanced by
``record(Outcome.APPLIED)``.
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.checkpoint.init_from.ema import DISABLED, check_ema, ema_identity
from statecraft.checkpoint.init_from.moving import (
    MovingCopy,
    check_saved,
    moving_copy,
    storage_marker,
)
from statecraft.errors import ResumeError, TrackingError, TrainerStateError

__all__ = ["IDENTITY_NAME", "IDENTITY_VERSION", "ModelCopies", "RolesIdentity"]

#: the reserved stateful name the identity is saved under (no user object may take it)
IDENTITY_NAME = "model_roles"
IDENTITY_VERSION = 2
#: the versions this release reads (1: a frozen reference only; no EMA)
READABLE_VERSIONS = (1, 2)
#: the fields compared on exact resume, and their value in a version-1 record
_COMPARED = {
    "reference": None,
    "reference_update_every": None,
    "old": "none",
    "old_update_every": 0,
}


@attrs.define
class ModelCopies:
    """The copies registered by ``track(reference=..., old=..., ema=...)`` (``None``: none).

    Attributes:
        reference: the reference module.
        reference_update_every: ``0``: a frozen reference; ``N > 0``: a moving one.
        moving_reference: the moving reference (``ref.pt``), ``None`` unless ``N > 0``.
        old: the moving old policy (``old.pt``), ``None`` when none is tracked.
        old_storage: how the save being captured stores old (set by :meth:`prepare_save`).
        seen_step: the optimizer step of the last boundary (refreshes once per update).
        ema: the EMA (an ``AveragedModel``) given to ``track``, maintained or not.
        ema_updates: ``False``: a model-provided EMA statecraft does not advance nor save.
        ema_offset: ``n_averaged - optimizer_step`` after statecraft's last EMA update in this
            process (``None``: none yet); :func:`~statecraft.checkpoint.init_from.ema.advance`.
    """

    reference: Any = None
    reference_update_every: int = 0
    moving_reference: MovingCopy | None = None
    old: MovingCopy | None = None
    old_storage: dict[str, Any] | None = None
    seen_step: int = 0
    ema: Any = None
    ema_updates: bool = True
    ema_offset: int | None = None

    @property
    def maintained_ema(self) -> Any:
        """The EMA statecraft advances, saves and initializes (``None``: none)."""
        return self.ema if self.ema_updates else None

    @classmethod
    def of(
        cls,
        reference: Any,
        reference_update_every: Any,
        *,
        reference_refresh: Any = None,
        old: Any = None,
        old_update_every: Any = 0,
        old_refresh: Any = None,
        ema: Any = None,
        ema_updates: Any = True,
        model: Any = None,
    ) -> ModelCopies:
        """Checked copies.

        Raises:
            TrackingError: a copy has no ``state_dict`` / ``load_state_dict``, a cadence is
                not an int (>= 0 for the reference, >= 1 for old), a refresh is not
                callable, or a cadence / refresh is given without its copy; what
                :func:`~.ema.check_ema` refuses.
        """
        if ema is not None:
            check_ema(ema, model, ema_updates)
            made = cls.of(
                reference,
                reference_update_every,
                reference_refresh=reference_refresh,
                old=old,
                old_update_every=old_update_every,
                old_refresh=old_refresh,
            )
            made.ema, made.ema_updates = ema, ema_updates
            return made
        if type(reference_update_every) is not int or reference_update_every < 0:
            raise TrackingError(
                f"track(reference_update_every={reference_update_every!r}): an int >= 0 "
                "(0: a frozen reference, never saved)"
            )
        for name, copy, extra in (
            ("reference", reference, reference_update_every or reference_refresh),
            ("old", old, old_update_every or old_refresh),
        ):
            if copy is None and extra:
                raise TrackingError(
                    f"track({name}_update_every=... / {name}_refresh=...) without {name}=: "
                    f"pass the {name} module too"
                )
        copies = cls()
        if old is not None:
            copies.old = moving_copy("old", old, old_update_every, old_refresh)
        if reference is None:
            return copies
        for method in ("state_dict", "load_state_dict"):
            if not callable(getattr(reference, method, None)):
                raise TrackingError(
                    f"track(reference=...): {type(reference).__name__} has no {method}; pass "
                    "the reference nn.Module"
                )
        if reference_update_every > 0:
            copies.moving_reference = moving_copy(
                "reference", reference, reference_update_every, reference_refresh
            )
        elif reference_refresh is not None:
            raise TrackingError(
                "track(reference_refresh=...) with a frozen reference (reference_update_every"
                "=0): a frozen reference is never refreshed; set reference_update_every > 0"
            )
        copies.reference, copies.reference_update_every = reference, reference_update_every
        return copies

    @property
    def tracked(self) -> bool:
        """Any copy is tracked (the identity record is saved)."""
        return (
            self.reference is not None or self.old is not None or self.maintained_ema is not None
        )

    def moving(self) -> tuple[MovingCopy, ...]:
        """The moving copies (old first)."""
        return tuple(c for c in (self.old, self.moving_reference) if c is not None)

    def identity(self) -> RolesIdentity:
        """This run's identity record (reads this object's moving state when saved)."""
        kind = "none" if self.reference is None else "moving" if self.moving_reference else "frozen"
        old = self.old
        return RolesIdentity(
            kind,
            self.reference_update_every,
            ema_identity(self.ema, self.ema_updates),
            old="none" if old is None else "moving",
            old_update_every=0 if old is None else old.every,
            copies=self,
        )

    def refresh_due(self, policy: Any, step: int) -> None:
        """At a boundary (``step_end`` / ``save`` / ``finalize``): after an applied update
        (``step`` past the last boundary's), refresh each moving copy whose cadence divides
        ``step``."""
        if step <= self.seen_step:
            return
        self.seen_step = step
        for copy in self.moving():
            if step % copy.every == 0:
                copy.refresh_from(policy, step)

    def prepare_save(self, step: int, *, emergency: bool) -> None:
        """Decide how the save of ``step`` stores old (before its trainer state is
        captured)."""
        self.old_storage = (
            None if self.old is None else storage_marker(self.old, step, emergency=emergency)
        )

    def saved_entries(self) -> tuple[str, ...]:
        """The copy entries the save being captured writes (``old``: unless derived)."""
        derived = self.old_storage is not None and self.old_storage["mode"] != "full"
        return tuple(c.entry for c in self.moving() if not (c.entry == "old" and derived))

    def check_saved(self, saved: Any, *, step: int, present: frozenset[str], location: str) -> None:
        """Exact resume, before anything is loaded: the saved record and copy files against
        this run's copies (:meth:`RolesIdentity.compare`, then
        :func:`~statecraft.checkpoint.init_from.moving.check_saved`)."""
        mine = self.identity()
        if isinstance(saved, dict):
            mine.compare(saved)
        check_saved(saved, mine.state_dict(), step=step, present=present, location=location)

    def rebuild(self, entry: str, policy: Any) -> None:
        """Reconstruct the derived copy ``entry`` (``old``) from the loaded ``policy``."""
        copy = self.old if entry == "old" else None
        if copy is None or copy.refreshed_at is None:
            raise TrainerStateError(
                f"the {entry} copy is derived from the policy but no refresh step was "
                "restored; resume from another checkpoint",
                field="model_roles.old_storage",
            )
        copy.refresh(policy, copy.module)


_FIX = (
    "Exact resume continues the same objective only; to start a new run from these "
    "weights, set init_from=<this checkpoint> in a new run (resume=off or a new name)"
)


@attrs.define
class RolesIdentity:
    """The stateful record of how the copies are kept (see the module docstring)."""

    reference: str
    reference_update_every: int
    ema: dict[str, Any] = attrs.field(factory=lambda: dict(DISABLED))
    old: str = "none"
    old_update_every: int = 0
    copies: ModelCopies | None = attrs.field(default=None, eq=False, repr=False)

    def state_dict(self) -> dict[str, Any]:
        copies = self.copies
        moving_ref = None if copies is None else copies.moving_reference
        old = None if copies is None else copies.old
        return {
            "version": IDENTITY_VERSION,
            "reference": self.reference,
            "reference_update_every": self.reference_update_every,
            "old": self.old,
            "old_update_every": self.old_update_every,
            "reference_refreshed_at": None if moving_ref is None else moving_ref.refreshed_at,
            "old_refreshed_at": None if old is None else old.refreshed_at,
            "old_storage": None if copies is None else copies.old_storage,
            "ema": dict(self.ema),
        }

    def check_saved(self, saved: Any, *, source: str) -> None:
        """Before any component is read: compare the checkpoint's record (``None``: it saved
        none, so no copies) with this run's (:meth:`compare`).

        Raises:
            ResumeError: the checkpoint saved no record (its copies differ from this run's).
            TrainerStateError: as :meth:`compare`.
        """
        if saved is None:
            raise ResumeError(
                f"{source}: the checkpoint saved no model_roles record (no reference, old "
                f"policy or maintained EMA) but this run keeps {self._described()}; exact "
                f"resume cannot prove those copies were kept. {_FIX}",
                field="model_roles",
            )
        self.compare(saved)

    def _described(self) -> str:
        parts = [f"a {self.reference} reference"] if self.reference != "none" else []
        if self.old != "none":
            parts.append(f"a {self.old} old policy")
        if self.ema.get("mode") == "enabled":
            parts.append(f"a maintained EMA ({self.ema})")
        return " and ".join(parts) or "no copies"

    def compare(self, saved: Any) -> None:
        """The checkpoint's record against this run's.

        Raises:
            TrainerStateError: an unknown version or a differing field (the fix: init_from).
        """
        fix = _FIX
        if not isinstance(saved, dict) or saved.get("version") not in READABLE_VERSIONS:
            version = saved.get("version") if isinstance(saved, dict) else saved
            raise TrainerStateError(
                f"trainer.pt: the model_roles record has version {version!r}, this release "
                f"reads versions {list(READABLE_VERSIONS)}. {fix}",
                field="model_roles.version",
            )
        if saved["version"] == 1:  # before the ema field: no maintained EMA
            saved = {**saved, "ema": dict(DISABLED)}
        mine = self.state_dict()
        problems = [
            f"{key}: saved {saved.get(key, v1)!r}, this run {mine[key]!r}"
            for key, v1 in _COMPARED.items()
            if saved.get(key, v1) != mine[key]
        ]
        if saved.get("ema") != mine["ema"]:
            problems.append(f"ema: saved {saved.get('ema')!r}, this run {mine['ema']!r}")
        problems += [
            f"{key}: saved {saved[key]!r}, not a step (an int >= 0) or None"
            for key in ("reference_refreshed_at", "old_refreshed_at")
            if saved.get(key) is not None and (type(saved[key]) is not int or saved[key] < 0)
        ]
        if problems:
            raise TrainerStateError(
                f"trainer.pt: the model's copies (reference, old policy, EMA) are kept "
                f"differently than when the checkpoint was saved ({'; '.join(problems)}). {fix}",
                field="model_roles",
                problems=problems,
            )

    def load_state_dict(self, saved: Any) -> None:
        """Compare the checkpoint's record with this run's (:meth:`compare`), then restore
        the moving copies' refresh steps."""
        self.compare(saved)
        copies = self.copies
        if copies is None:
            return
        if copies.old is not None:
            copies.old.refreshed_at = saved.get("old_refreshed_at")
        if copies.moving_reference is not None:
            copies.moving_reference.refreshed_at = saved.get("reference_refreshed_at")
