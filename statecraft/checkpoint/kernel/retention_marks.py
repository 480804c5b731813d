"""Retention's marks on an iteration, as every reader sees them: the catalog, resume,
``statecraft.load_weights`` and ``statecraft inspect``.

Retention (:mod:`statecraft.checkpoint.kernel.retention_records`) only *adds* a marker before it
removes anything, so the marker alone decides what an iteration is from then on:

- ``iter_N/.retention-invalidated.json`` (whatever else is left): **invalidated**, retention is
  deleting it; never adopted, never loaded, the next retention pass finishes it.
- ``iter_N/.retention-weights-only.json`` beside a manifest: **weights-only**, its optimizer
  component was (or is being) removed; model and trainer state verify, it loads for
  evaluation, it is never a resume source.

A marker that is present but damaged still counts (fail closed): the iteration is treated as
marked, with the damage in the reason. :func:`read_mark` reads them (two ``stat`` calls for an
unmarked iteration, nothing else); :func:`weights_only_refusal` and
:func:`invalidated_refusal` are the errors of an explicit resume from a marked iteration;
:func:`newest_resumable` is the iteration such a refusal points to.
"""

from __future__ import annotations

import enum

import attrs

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.retention_records import (
    INVALIDATED_MARKER,
    WEIGHTS_ONLY_MARKER,
    read_invalidated,
    read_weights_only,
)
from statecraft.checkpoint.kernel.verify import list_iterations, read_manifest
from statecraft.errors import CheckpointCorruptError, CheckpointError, WeightsOnlyResumeError
from statecraft.storage.base import Store

__all__ = [
    "MARKERS",
    "Mark",
    "MarkKind",
    "invalidated_refusal",
    "newest_resumable",
    "read_mark",
    "weights_only_refusal",
]

#: every file retention adds inside an ``iter_N/`` (shown as such by ``inspect``)
MARKERS = (INVALIDATED_MARKER, WEIGHTS_ONLY_MARKER)


class MarkKind(enum.Enum):
    """Which retention marker an iteration holds (invalidated wins over weights-only)."""

    WEIGHTS_ONLY = "weights_only"
    INVALIDATED = "invalidated"


@attrs.frozen
class Mark:
    """Retention's marker on one iteration.

    Attributes:
        kind: invalidated or weights-only.
        iteration: the marked iteration.
        policy: the policy recorded in the marker (``"latest 1"``), ``None`` when the marker
            is damaged.
        pruned: the entries a weights-only marker says were removed (``()`` otherwise).
        problem: why the marker does not parse (``None``: it is a valid record).
    """

    kind: MarkKind
    iteration: int
    policy: str | None
    pruned: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def marker(self) -> str:
        """The marker's path relative to the checkpoints root."""
        name = INVALIDATED_MARKER if self.kind is MarkKind.INVALIDATED else WEIGHTS_ONLY_MARKER
        return f"{iter_dirname(self.iteration)}/{name}"

    @property
    def by(self) -> str:
        """``retention (latest 1)``, or what is known when the marker is damaged."""
        if self.policy is not None:
            return f"retention ({self.policy})"
        return f"retention (its marker {self.marker} is damaged: {self.problem})"

    def reason(self) -> str:
        """The catalog reason of the marked iteration, one line."""
        if self.kind is MarkKind.INVALIDATED:
            return (
                f"invalidated: {self.by} is deleting it; it is never adopted or loaded, and "
                "the next retention pass finishes removing it"
            )
        return (
            f"weights-only: its optimizer state was removed by {self.by}; it holds weights and "
            "trainer state for evaluation (statecraft.load_weights) but cannot resume exactly"
        )


def read_mark(store: Store, iteration: int) -> Mark | None:
    """Retention's marker on ``iteration`` of the checkpoints root ``store`` (``None``: none).

    The store operations are ``stat(iter_N/.retention-invalidated.json)``, then (absent)
    ``stat(iter_N/.retention-weights-only.json)``, then reading the marker found. Never raises
    for a damaged marker: it still counts, with ``problem`` set.
    """
    name = iter_dirname(iteration)
    if store.stat(f"{name}/{INVALIDATED_MARKER}") is not None:
        try:
            record = read_invalidated(store, iteration)
        except (CheckpointCorruptError, FileNotFoundError) as exc:
            return Mark(MarkKind.INVALIDATED, iteration, None, problem=_problem(exc))
        return Mark(MarkKind.INVALIDATED, iteration, record.policy)
    if store.stat(f"{name}/{WEIGHTS_ONLY_MARKER}") is not None:
        try:
            weights = read_weights_only(store, iteration)
        except (CheckpointCorruptError, FileNotFoundError) as exc:
            return Mark(MarkKind.WEIGHTS_ONLY, iteration, None, problem=_problem(exc))
        return Mark(MarkKind.WEIGHTS_ONLY, iteration, weights.policy, weights.pruned)
    return None


def _problem(exc: Exception) -> str:
    if isinstance(exc, CheckpointCorruptError):
        return str(exc.problem)
    return "it vanished while being read"  # FileNotFoundError: removed between stat and read


def newest_resumable(store: Store) -> int | None:
    """The newest iteration of ``store`` that holds a readable manifest and no retention
    marker, i.e. still holds its optimizer (manifests only: cheap, not a verification);
    ``None`` when there is none."""
    for iteration in list_iterations(store):
        if read_mark(store, iteration) is not None:
            continue
        if store.stat(f"{iter_dirname(iteration)}/{MANIFEST_NAME}") is None:
            continue
        try:
            read_manifest(store, iteration)
        except (CheckpointError, OSError):
            continue
        return iteration
    return None


def _instead(store: Store, newest: int | None, *, what: str) -> str:
    if newest is None:
        return (
            f"no iteration of {store.describe()} still holds {what}; load its weights with "
            "statecraft.load_weights as initialisation, or set resume=off to start a new attempt"
        )
    return f"resume from {iter_dirname(newest)}, the newest that holds {what}"


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def weights_only_refusal(
    store: Store, mark: Mark, *, source: str, newest: int | None
) -> WeightsOnlyResumeError:
    """The refusal of ``resume=<source>`` naming the weights-only ``mark`` of ``store``;
    ``newest`` is :func:`newest_resumable` of ``store``."""
    where = f"{store.describe()}/{iter_dirname(mark.iteration)}"
    return WeightsOnlyResumeError(
        f"resume={source}: {where} is weights-only: its optimizer state was removed by "
        f"{mark.by}; it holds weights and trainer state for evaluation (statecraft.load_weights)"
        f" but cannot resume exactly; {_instead(store, newest, what='its optimizer')}, or set "
        "keep_optim_last=0 to keep optimizer state. Nothing was loaded",
        path=where,
        policy=mark.policy,
        newest_resumable=None if newest is None else iter_dirname(newest),
    )


def invalidated_refusal(
    store: Store, mark: Mark, *, source: str, newest: int | None, loading: bool = False
) -> CheckpointCorruptError:
    """The refusal of ``resume=<source>`` (``loading``: of ``load_weights(model, source)``)
    naming the invalidated ``mark`` of ``store``; ``newest`` is :func:`newest_resumable` of
    ``store``."""
    where = f"{store.describe()}/{iter_dirname(mark.iteration)}"
    if loading:
        asked = f"load_weights(model, {source!r})"
        fix = (
            f"Load {iter_dirname(newest)}, the newest whole checkpoint, or point load_weights at "
            "the run directory for the newest that verifies."
            if newest is not None
            else "Point load_weights at the run directory for the newest checkpoint that verifies."
        )
    else:
        asked = f"resume={source}"
        fix = f"{_upper(_instead(store, newest, what='a whole checkpoint'))}, or use resume=auto."
    return CheckpointCorruptError(
        where,
        f"is invalidated: {mark.by} is deleting it, so whatever is left of it is never "
        f"adopted or loaded ({asked} refused; nothing was loaded)",
        fix,
    )
