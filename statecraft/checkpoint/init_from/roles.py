"""The model's copies a run keeps beside it (``Checkpointer.track(reference=..., ema=...)``), and
the versioned identity of how they are kept, recorded in every checkpoint.

A **frozen reference** (``reference_update_every=0``, the default) is never saved: the loop
builds it before ``resume()`` on every start (a copy of the freshly built model), and
``init_from`` (when set) loads the base weights into it on every start, resumed windows
included (:mod:`statecraft.checkpoint.init_from.start`). The resume load never touches it, so
the anchor is the base weights exactly, whichever window the run is in.

:class:`RolesIdentity` is saved as the reserved stateful object ``model_roles`` (rank 0's
``trainer.pt``, so it goes through the save's one commit path and the crash harness's
coverage of ``trainer.pt``): ``{"version": 2, "reference": "none" | "frozen",
"reference_update_every": N, "ema": {"mode": "disabled"} | {"mode": "enabled", ...}}``
(:func:`~statecraft.checkpoint.init_from.ema.ema_identity`). A version-1 record (no ``ema``)
reads as ``{"mode": "disabled"}``; a checkpoint without the record as no reference and no EMA.
Exact resume compares it with this run's before any component is read
(:meth:`RolesIdentity.check_saved`): a changed reference cadence, a reference or a maintained
EMA added or dropped, a changed EMA averaging or decay, or an unknown version fails closed
(nothing loaded), naming ``init_from`` as the way to start a new run from those weights.

A **maintained EMA** (:mod:`.ema`) is saved with the weights in ``model.pt`` and advanced by
``record(Outcome.APPLIED)``.
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.checkpoint.init_from.ema import DISABLED, check_ema, ema_identity
from statecraft.errors import NotSupportedYetError, ResumeError, TrackingError, TrainerStateError

__all__ = ["IDENTITY_NAME", "IDENTITY_VERSION", "ModelCopies", "RolesIdentity"]

#: the reserved stateful name the identity is saved under (no user object may take it)
IDENTITY_NAME = "model_roles"
IDENTITY_VERSION = 2
#: the record versions this release reads (1: before the ``ema`` field: EMA disabled)
READABLE_VERSIONS = (1, 2)


@attrs.define
class ModelCopies:
    """The copies registered by ``track(reference=..., ema=...)`` (``None``: none).

    Attributes:
        reference: the reference module.
        reference_update_every: ``0``: a frozen reference.
        ema: the EMA (an ``AveragedModel``) given to ``track``, maintained or not.
        ema_updates: ``False``: a model-provided EMA statecraft does not advance nor save.
        ema_offset: ``n_averaged - optimizer_step`` after statecraft's last EMA update in this
            process (``None``: none yet); :func:`~statecraft.checkpoint.init_from.ema.advance`.
    """

    reference: Any = None
    reference_update_every: int = 0
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
        ema: Any = None,
        ema_updates: Any = True,
        model: Any = None,
    ) -> ModelCopies:
        """Checked copies.

        Raises:
            TrackingError: ``reference`` has no ``state_dict`` / ``load_state_dict``, or the
                cadence is not an int >= 0; what :func:`~.ema.check_ema` refuses.
            NotSupportedYetError: a moving reference (``reference_update_every > 0``).
        """
        if ema is not None:
            check_ema(ema, model, ema_updates)
            return attrs.evolve(
                cls.of(reference, reference_update_every), ema=ema, ema_updates=ema_updates
            )
        if type(reference_update_every) is not int or reference_update_every < 0:
            raise TrackingError(
                f"track(reference_update_every={reference_update_every!r}): an int >= 0 "
                "(0: a frozen reference, never saved)"
            )
        if reference is None:
            if reference_update_every:
                raise TrackingError(
                    "track(reference_update_every=...) without reference=: pass the "
                    "reference module too"
                )
            return cls()
        for method in ("state_dict", "load_state_dict"):
            if not callable(getattr(reference, method, None)):
                raise TrackingError(
                    f"track(reference=...): {type(reference).__name__} has no {method}; pass "
                    "the reference nn.Module"
                )
        if reference_update_every > 0:
            raise NotSupportedYetError(
                "track(reference_update_every)",
                reference_update_every,
                "a moving reference (training state saved to ref.pt) is not built yet; use a "
                "frozen reference (reference_update_every=0)",
            )
        return cls(reference, reference_update_every)

    def identity(self) -> RolesIdentity:
        """This run's identity record."""
        kind = "none" if self.reference is None else "frozen"
        return RolesIdentity(
            kind, self.reference_update_every, ema_identity(self.ema, self.ema_updates)
        )

    @property
    def recorded(self) -> bool:
        """Whether the identity differs from a run without copies (then it is saved)."""
        return self.reference is not None or self.maintained_ema is not None


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

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": IDENTITY_VERSION,
            "reference": self.reference,
            "reference_update_every": self.reference_update_every,
            "ema": dict(self.ema),
        }

    def check_saved(self, saved: Any, *, source: str) -> None:
        """Before any component is read: compare the checkpoint's record (``None``: it saved
        none, so no reference and no EMA) with this run's.

        Raises:
            ResumeError: the checkpoint saved no record (its copies differ from this run's).
            TrainerStateError: as :meth:`load_state_dict`.
        """
        if saved is None:
            raise ResumeError(
                f"{source}: the checkpoint saved no model_roles record (no reference, no "
                f"maintained EMA) but this run keeps {self._described()}; exact resume cannot "
                f"prove those copies were kept. {_FIX}",
                field="model_roles",
            )
        self.load_state_dict(saved)

    def _described(self) -> str:
        parts = [f"a {self.reference} reference"] if self.reference != "none" else []
        if self.ema.get("mode") == "enabled":
            parts.append(f"a maintained EMA ({self.ema})")
        return " and ".join(parts) or "no copies"

    def load_state_dict(self, saved: Any) -> None:
        """Compare the checkpoint's record with this run's; equal: nothing to restore.

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
            f"{key}: saved {saved.get(key)!r}, this run {mine[key]!r}"
            for key in ("reference", "reference_update_every", "ema")
            if saved.get(key) != mine[key]
        ]
        if problems:
            raise TrainerStateError(
                f"trainer.pt: the model's copies (reference, EMA) are kept differently than "
                f"when the checkpoint was saved ({'; '.join(problems)}). {fix}",
                field="model_roles",
                problems=problems,
            )
