"""Listing a run's committed checkpoints, and selecting the latest or the best one.

Each checkpoints directory is read by the one catalog scanner
(:func:`~statecraft.checkpoint.kernel.catalog.scan`): at depth ``STAT`` by default (the
manifest, a ``stat`` of every recorded file, ``trainer.pt`` and the validation records; no
bulk file hashed, retention's reading), or verified at ``verify="size"`` / ``"digest"``.
Only committed checkpoints are listed: committed, the validation stages (pending or
published) and weights-only ones (``state`` says which); partial, corrupt and invalidated
directories never are. The metrics are the evaluated record's (a durable validation:
``validation.save_checkpoint=true``), the ones ``BestN`` retention judges.

Anchors' names: Orbax's ``all_steps()`` / ``latest_step()`` / ``best_step()`` are
:attr:`CheckpointList.steps`, :meth:`CheckpointList.latest` and :meth:`CheckpointList.best`;
Lightning's ``best_model_path`` / ``best_model_score`` are ``best(metric).path`` and
``best(metric).metrics[metric]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from statecraft.checkpoint.catalog_api.sources import CheckpointsDir, resolve
from statecraft.checkpoint.kernel.catalog import CatalogEntry, CheckpointState, Depth, scan
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.verify import OPTIMIZER_ENTRIES, read_manifest
from statecraft.errors import CheckpointError, ConfigError, ConfigIssue
from statecraft.storage.local import LocalStore

__all__ = ["CheckpointInfo", "CheckpointList", "list_checkpoints", "parse_which"]

_LISTED = frozenset(
    {
        CheckpointState.COMMITTED,
        CheckpointState.EVALUATION_PENDING,
        CheckpointState.PUBLICATION_PENDING,
        CheckpointState.PUBLISHED,
        CheckpointState.WEIGHTS_ONLY,
    }
)
_VERIFY = ("stat", "size", "digest")
_MODES = ("min", "max")
_WHICH = "'latest', 'best:<metric>' (lowest), 'best:<metric>:max', or a step number"


@attrs.frozen
class CheckpointInfo:
    """One committed checkpoint.

    Attributes:
        step: its optimizer step (the iteration: ``iter_<9 digits>``).
        state: ``"committed"``, ``"evaluation_pending"``, ``"publication_pending"``,
            ``"published"`` or ``"weights_only"`` (optimizer state removed by retention: it
            loads with ``load_weights``, it is not a resume source).
        metrics: the validation metrics recorded with it (``{}``: none recorded).
        size_bytes: the bytes of the files its manifest records (a weights-only one without
            its removed optimizer files).
        path: its ``iter_*`` directory.
        attempt: the attempt (``RUN_TS``) holding it (``None``: a legacy flat
            ``checkpoints/``, or a ``checkpoints/`` dir given directly).
    """

    step: int
    state: str
    metrics: Mapping[str, float]
    size_bytes: int
    path: Path
    attempt: str | None

    @property
    def resumable(self) -> bool:
        """It still holds its optimizer state (``resume=<path>`` may adopt it)."""
        return self.state != CheckpointState.WEIGHTS_ONLY.value


@attrs.frozen
class CheckpointList:
    """A run's committed checkpoints, newest attempt first and newest step first within one.

    Iterating yields :class:`CheckpointInfo`; ``len()`` counts them.
    """

    source: str
    items: tuple[CheckpointInfo, ...]

    def __iter__(self) -> Iterator[CheckpointInfo]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def steps(self) -> list[int]:
        """Every listed step, newest first (Orbax's ``all_steps()``, reversed)."""
        return [info.step for info in self.items]

    def latest(self) -> CheckpointInfo | None:
        """The newest committed checkpoint (of the newest attempt holding one), or ``None``."""
        return self.items[0] if self.items else None

    def step(self, step: int) -> CheckpointInfo:
        """The checkpoint of ``step`` (the newest attempt's, when several hold it).

        Raises:
            CheckpointError: no committed checkpoint of that step, naming the listed steps.
        """
        for info in self.items:
            if info.step == step:
                return info
        raise CheckpointError(
            f"{self.source}: no committed checkpoint of step {step}; listed steps: "
            f"{self.steps or 'none'}"
        )

    def best(self, metric: str, mode: str = "min") -> CheckpointInfo | None:
        """The checkpoint with the lowest (``mode="min"``) or highest (``"max"``) recorded
        ``metric`` (ties: the newest); ``None`` when no checkpoint recorded any metric yet.

        Raises:
            ConfigError: ``metric`` is not a non-empty str, or ``mode`` is not min / max.
            CheckpointError: checkpoints recorded metrics, but none ``metric`` (names those
                recorded: a misspelt name is never a silent ``None``).
        """
        if not isinstance(metric, str) or not metric:
            raise ConfigError(
                [ConfigIssue("metric", metric, "a non-empty metric name")], source="best()"
            )
        if mode not in _MODES:
            raise ConfigError([ConfigIssue("mode", mode, "'min' or 'max'")], source="best()")
        scored = [info for info in self.items if metric in info.metrics]
        if not scored:
            recorded = sorted({name for info in self.items for name in info.metrics})
            if not recorded:
                return None
            raise CheckpointError(
                f"{self.source}: no checkpoint recorded the metric {metric!r}; recorded: "
                f"{recorded}"
            )
        sign = 1.0 if mode == "min" else -1.0
        return min(scored, key=lambda info: sign * float(info.metrics[metric]))

    def select(self, which: str | int) -> CheckpointInfo:
        """The checkpoint ``which`` names (:func:`parse_which`).

        Raises:
            ConfigError: ``which`` does not parse.
            CheckpointError: nothing listed, or nothing matches (the message says what is).
        """
        kind, metric, mode, step = parse_which(which)
        if kind == "step":
            return self.step(step)
        chosen = self.latest() if kind == "latest" else self.best(metric, mode)
        if chosen is None:
            what = "committed checkpoint" if kind == "latest" else f"checkpoint with {metric!r}"
            raise CheckpointError(
                f"{self.source}: no {what} (which={which!r}); listed steps: "
                f"{self.steps or 'none'}"
            )
        return chosen


def parse_which(which: str | int) -> tuple[str, str, str, int]:
    """``(kind, metric, mode, step)`` of a selection: ``"latest"``, ``"best:<metric>"``
    (``mode="min"``), ``"best:<metric>:max"`` / ``":min"``, or a step number.

    Raises:
        ConfigError: anything else, naming the forms.
    """
    if isinstance(which, int) and not isinstance(which, bool) and which >= 0:
        return "step", "", "min", which
    if which == "latest":
        return "latest", "", "min", 0
    parts = which.split(":") if isinstance(which, str) else []
    if len(parts) in (2, 3) and parts[0] == "best" and parts[1]:
        mode = parts[2] if len(parts) == 3 else "min"
        if mode in _MODES:
            return "best", parts[1], mode, 0
    raise ConfigError([ConfigIssue("which", which, _WHICH)], source="checkpoint selection")


def _size(store: LocalStore, entry: CatalogEntry) -> int:
    manifest = read_manifest(store, entry.iteration)
    pruned = entry.state is CheckpointState.WEIGHTS_ONLY
    return sum(
        recorded.size
        for name, recorded in manifest.files.items()
        if not (pruned and name.split("/", 1)[0] in OPTIMIZER_ENTRIES)
    )


def _listed(directory: CheckpointsDir, verify: str) -> list[CheckpointInfo]:
    store = LocalStore(str(directory.path.resolve()))
    if verify == "stat":
        catalog = scan(store, depth=Depth.STAT)
    else:
        catalog = scan(store, level=verify, keep_payloads=False)
    found = []
    for entry in catalog.entries():
        if entry.state not in _LISTED:
            continue
        try:
            size = _size(store, entry)
        except (OSError, CheckpointError):  # removed since it was read (a retention pass)
            continue
        found.append(
            CheckpointInfo(
                entry.iteration,
                entry.state.value,
                dict(entry.metrics or {}),
                size,
                directory.path / iter_dirname(entry.iteration),
                directory.attempt,
            )
        )
    return found


def list_checkpoints(source: str | os.PathLike[str], *, verify: str = "stat") -> CheckpointList:
    """The committed checkpoints under ``source`` (see
    :func:`~statecraft.checkpoint.catalog_api.sources.resolve`), newest attempt first.

    Args:
        verify: ``"stat"`` (the default: manifests, file sizes, ``trainer.pt``; nothing
            hashed), ``"size"`` or ``"digest"`` (verified; what does not verify is not listed).

    Raises:
        CheckpointSourceError: as :func:`~statecraft.checkpoint.catalog_api.sources.resolve`.
        ConfigError: ``verify`` is not one of the three.
    """
    if verify not in _VERIFY:
        raise ConfigError(
            [ConfigIssue("verify", verify, "'stat', 'size' or 'digest'")], source="checkpoints()"
        )
    items = [info for d in resolve(source) for info in _listed(d, verify)]
    return CheckpointList(os.fspath(source), tuple(items))
