"""One multi-role run: its roles, its writers, its resume and its boundaries.

The facade (``statecraft/checkpoint/facade/roles.py``) hands the calls of a loop that tracked
roles here: :meth:`RoleRun.resume` picks the newest committed boundary of the attempt's
``role_checkpoints/`` (:mod:`.reading`) and loads every role all or nothing;
:meth:`RoleRun.save` stages every role's bytes and runs the ``roles_boundary`` machine, in the
background when ``save_async`` (one in-flight write per role, :mod:`.writers`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from statecraft.checkpoint.kernel.catalog_entries import PassedOver
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.roles.bindings import BoundaryContext
from statecraft.checkpoint.roles.layout import MARKER_NAME, boundary_dir
from statecraft.checkpoint.roles.loop_state import check_loop_state
from statecraft.checkpoint.roles.prune_bindings import KeepBoundaries, RolesPruneContext
from statecraft.checkpoint.roles.reading import BoundaryVerdict, pick_boundary, settle_boundary
from statecraft.checkpoint.roles.records import BoundaryMarker, decode_marker
from statecraft.checkpoint.roles.staging import apply_roles, load_roles, stage_roles
from statecraft.checkpoint.roles.tracking import RoleSet
from statecraft.checkpoint.roles.writers import RoleWriters
from statecraft.engine import Machine
from statecraft.errors import (
    CheckpointCorruptError,
    ResumeError,
    RetentionError,
    TrackingError,
    WriterLeaseError,
)
from statecraft.storage.base import Store

__all__ = ["RoleRun", "RolesResume"]

log = logging.getLogger("statecraft.roles")


@attrs.frozen
class RolesResume:
    """What a multi-role resume did.

    Attributes:
        iteration: the adopted boundary's iteration (0 for a fresh start): the loop continues
            its outer iteration from here.
        counters: each role's restored optimizer counter (0 each for a fresh start).
        source: the adopted boundary's path, or ``None``.
        reason: one line saying why.
        passed_over: newer boundaries not adopted, each with its reason.
        marker: the adopted ``_SUCCESS``.
    """

    iteration: int
    counters: dict[str, int]
    source: str | None
    reason: str
    passed_over: tuple[PassedOver, ...] = ()
    marker: BoundaryMarker | None = None


@attrs.define(eq=False)
class RoleRun:
    """The roles of one run and what has happened to them.

    Attributes:
        store: the attempt's ``role_checkpoints/`` store (set at the resume).
        resumed: ``resume()`` ran.
        adopted: the marker of the boundary the resume adopted (``None``: fresh start).
        saved: the iteration of this run's last boundary save.
        machine: the boundary table (tests pass broken ones).
        keep: the run's model retention policy over committed boundaries (``None``: keep
            every one); each boundary's pass runs after its commit (:meth:`prune`).
        pruned: the boundaries the passes of this run deleted (partials included).
    """

    roles: RoleSet = attrs.field(factory=RoleSet)
    writers: RoleWriters = attrs.field(factory=RoleWriters)
    store: Store | None = None
    resumed: bool = False
    adopted: BoundaryMarker | None = None
    saved: int | None = None
    machine: Machine | None = None
    keep: KeepBoundaries | None = None
    pruned: list[int] = attrs.field(factory=list)

    # ------------------------------------------------------------------ resume
    def resume(
        self,
        store: Store,
        *,
        mode: str,
        explicit: tuple[str, Store, BoundaryVerdict] | None = None,
    ) -> RolesResume:
        """Adopt the newest committed boundary (``mode="auto"``), the verified ``explicit``
        one (``resume=<path>``: the text, its roles store and its committed verdict, from
        :func:`~statecraft.checkpoint.roles.explicit.verify_explicit_boundary`), or start
        fresh (``"off"``), and load every role; nothing is applied unless every role loads.

        Raises:
            ResumeError: a second resume; the boundary holds other roles than the tracked
                ones (naming both); nothing loaded.
            CheckpointCorruptError: a verified boundary's file does not load.
        """
        if self.resumed:
            raise ResumeError("resume() was called already; call it once, before the loop")
        self.roles.require_several("resume")
        self.store, self.resumed = store, True
        names = self.roles.names
        if explicit is not None:
            text, source, verdict = explicit
            return self._adopt(source, verdict, (), f"resume={text}: the boundary it names")
        if mode == "off":
            return RolesResume(0, dict.fromkeys(names, 0), None, "resume=off: a fresh start")
        chosen, passed = pick_boundary(store)
        for item in passed:
            log.warning("passed over %s: %s", item.name, item.reason)
        if chosen is None:
            why = "no committed boundary" + (f" ({len(passed)} passed over)" if passed else "")
            return RolesResume(0, dict.fromkeys(names, 0), None, why, passed)
        return self._adopt(store, chosen, passed)

    def _adopt(
        self,
        store: Store,
        chosen: BoundaryVerdict,
        passed: tuple[PassedOver, ...],
        why: str = "adopted the newest committed boundary",
    ) -> RolesResume:
        marker = chosen.marker
        if marker is None:  # pragma: no cover - a committed verdict has one
            raise ResumeError(f"{chosen.name}: committed without a marker")
        names = self.roles.names
        if marker.roles != names:
            missing = [r for r in marker.roles if r not in names]
            extra = [r for r in names if r not in marker.roles]
            raise ResumeError(
                f"{store.describe()}/{chosen.name} holds roles {marker.roles}, this run tracks "
                f"{names} (not tracked: {missing or 'none'}; not in the boundary: "
                f"{extra or 'none'}; order matters: the first role holds the data). Nothing "
                "was loaded; track the same roles in the same order, or start a new run "
                "(resume=off)",
                path=f"{store.describe()}/{chosen.name}",
            )
        settle_boundary(store, chosen)
        apply_roles(load_roles(store, chosen.iteration, chosen.manifests, names),
                    self.roles.roles)  # fmt: skip
        self.adopted = marker
        counters = {name: chosen.manifests[name].optimizer_step for name in names}
        source = f"{store.describe()}/{chosen.name}"
        log.info("resumed from %s (counters %s)", source, counters)
        return RolesResume(
            chosen.iteration, counters, source, f"{why} {chosen.name}", passed, marker,
        )  # fmt: skip

    # -------------------------------------------------------------------- save
    def save(
        self,
        iteration: object,
        loop_state: Mapping[str, Any] | None,
        *,
        background: bool,
        retain: bool = True,
    ) -> Any:
        """Save boundary ``iteration``: join the previous one, stage every role, run the
        ``roles_boundary`` machine (in the background when ``background``), then the
        retention pass (:meth:`prune`; not when ``retain`` is false: an emergency save).

        Returns:
            the machine's ``BoundaryContext`` (synchronous), or the boundary's future.

        Raises:
            TrackingError: ``iteration`` is not an int >= 0, ``loop_state`` breaks its rule,
                fewer than two roles, or no ``resume()`` first.
            RoleWriteError / IterationCommittedError / StoreError: the boundary failed
                (synchronous; a background one raises at the next join).
        """
        if type(iteration) is not int or iteration < 0:
            raise TrackingError(
                f"save(iteration={iteration!r}): a multi-role boundary needs the loop's outer "
                "iteration as an int >= 0 (iter_N of the boundary)"
            )
        state = check_loop_state(loop_state)
        self.roles.require_several("save a boundary")
        if self.store is None:
            raise TrackingError("save(): call ckpt.resume() once before the first boundary")
        self.writers.join()
        ctx = BoundaryContext(
            self.store, iteration, stage_roles(list(self.roles.roles.values())), state,
            dispatch=self.writers.dispatch if background else None,
        )  # fmt: skip
        machine = self.machine or shipped_machine("roles_boundary")
        self.saved = iteration

        def commit() -> BoundaryContext:
            machine.recover(ctx).raise_for_failure()
            if retain:
                self.prune(iteration)
            return ctx

        return self.writers.start(commit) if background else commit()

    def committed(self, iteration: int) -> bool:
        """Boundary ``iteration`` holds a ``_SUCCESS`` that decodes and names it: what covers
        a stop's emergency save (a marker exists only once every role is committed; the
        reader verifies every file before adopting). Reads only."""
        if self.store is None:
            return False
        here = boundary_dir(iteration)
        try:
            data = self.store.read_bytes(f"{here}/{MARKER_NAME}")
            marker = decode_marker(data, source=f"{self.store.describe()}/{here}/{MARKER_NAME}")
        except (FileNotFoundError, NotADirectoryError, CheckpointCorruptError):
            return False
        return marker.iteration == iteration

    # --------------------------------------------------------------- retention
    def prune(self, saved: int) -> RolesPruneContext:
        """The retention pass after boundary ``saved`` is committed and durable (inside the
        boundary's write: async included): the ``roles_prune`` machine deletes the committed
        boundaries ``keep`` does not keep (never ``saved`` nor the newest committed one),
        each ``_SUCCESS`` first, and every partial boundary older than ``saved``.

        Raises:
            RetentionError: a removal failed; ``saved`` is committed and durable, a boundary
                begun is a partial (never adopted) the next pass removes.
            WriterLeaseError: another process took over the attempt.
        """
        if self.store is None:  # pragma: no cover - save() checks it first
            raise TrackingError("prune(): no roles store (call resume() first)")
        ctx = RolesPruneContext(self.store, saved, self.keep)
        result = shipped_machine("roles_prune").recover(ctx)
        if result.failed:
            error = result.error
            if isinstance(error, WriterLeaseError):
                raise error
            where = f"{self.store.describe()}/{boundary_dir(saved)}"
            raise RetentionError(
                f"the retention of multi-role boundaries after {where} failed "
                f"({type(error).__name__}: {error}). {boundary_dir(saved)} is committed and "
                "durable; every kept boundary is untouched and one begun is a partial the next "
                "pass removes. Fix the cause (permissions, a failing disk) and save again, or "
                "set keep_model_last=0 to keep every boundary",
                path=where,
                iteration=saved,
            ) from error
        self.pruned.extend(ctx.swept)
        return ctx
