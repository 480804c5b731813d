"""The model's copies a run keeps beside it (``Checkpointer.track(reference=...)``), and the
versioned identity of how they are kept, recorded in every checkpoint.

A **frozen reference** (``reference_update_every=0``, the default) is never saved: the loop
builds it before ``resume()`` on every start (a copy of the freshly built model), and
``init_from`` (when set) loads the base weights into it on every start, resumed windows
included (:mod:`statecraft.checkpoint.init_from.start`). The resume load never touches it, so
the anchor is the base weights exactly, whichever window the run is in.

:class:`RolesIdentity` is saved as the reserved stateful object ``model_roles`` (rank 0's
``trainer.pt``, so it goes through the save's one commit path and the crash harness's
coverage of ``trainer.pt``): ``{"version": 1, "reference": "none" | "frozen",
"reference_update_every": N}``. Exact resume compares it with this run's before anything is
loaded into the model: a changed reference cadence, a reference added or dropped, or an
unknown version fails closed (nothing loaded), naming ``init_from`` as the way to start a new
run from those weights.
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.errors import NotSupportedYetError, TrackingError, TrainerStateError

__all__ = ["IDENTITY_NAME", "IDENTITY_VERSION", "ModelCopies", "RolesIdentity"]

#: the reserved stateful name the identity is saved under (no user object may take it)
IDENTITY_NAME = "model_roles"
IDENTITY_VERSION = 1


@attrs.define
class ModelCopies:
    """The copies registered by ``track(reference=...)`` (``None``: none).

    Attributes:
        reference: the reference module.
        reference_update_every: ``0``: a frozen reference.
    """

    reference: Any = None
    reference_update_every: int = 0

    @classmethod
    def of(cls, reference: Any, reference_update_every: Any) -> ModelCopies:
        """Checked copies.

        Raises:
            TrackingError: ``reference`` has no ``state_dict`` / ``load_state_dict``, or the
                cadence is not an int >= 0.
            NotSupportedYetError: a moving reference (``reference_update_every > 0``).
        """
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
        return RolesIdentity(kind, self.reference_update_every)


@attrs.define
class RolesIdentity:
    """The stateful record of how the copies are kept (see the module docstring)."""

    reference: str
    reference_update_every: int

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": IDENTITY_VERSION,
            "reference": self.reference,
            "reference_update_every": self.reference_update_every,
        }

    def load_state_dict(self, saved: Any) -> None:
        """Compare the checkpoint's record with this run's; equal: nothing to restore.

        Raises:
            TrainerStateError: an unknown version or a differing field (the fix: init_from).
        """
        fix = (
            "Exact resume continues the same objective only; to start a new run from these "
            "weights, set init_from=<this checkpoint> in a new run (resume=off or a new name)"
        )
        if not isinstance(saved, dict) or saved.get("version") != IDENTITY_VERSION:
            version = saved.get("version") if isinstance(saved, dict) else saved
            raise TrainerStateError(
                f"trainer.pt: the model_roles record has version {version!r}, this release "
                f"reads version {IDENTITY_VERSION}. {fix}",
                field="model_roles.version",
            )
        mine = self.state_dict()
        problems = [
            f"{key}: saved {saved.get(key)!r}, this run {mine[key]!r}"
            for key in ("reference", "reference_update_every")
            if saved.get(key) != mine[key]
        ]
        if problems:
            raise TrainerStateError(
                f"trainer.pt: the reference is kept differently than when the checkpoint was "
                f"saved ({'; '.join(problems)}). {fix}",
                field="model_roles",
                problems=problems,
            )
