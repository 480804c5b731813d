"""The records of the public catalog: one listed checkpoint (:class:`CheckpointInfo`), a run's
list of them with the latest / best / step selections (:class:`CheckpointList`), and the
``which=`` selection's parser (:func:`parse_which`). Every listing builds these: a run's
``iter_*`` iterations (:mod:`~statecraft.checkpoint.catalog_api.listing`) and the committed
units of the framework integrations (:mod:`~statecraft.checkpoint.catalog_api.unit_listing`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from statecraft.checkpoint.kernel.catalog import CheckpointState
from statecraft.errors import CheckpointError, ConfigError, ConfigIssue

__all__ = ["VERIFY_LEVELS", "CheckpointInfo", "CheckpointList", "parse_which"]

VERIFY_LEVELS = ("stat", "size", "digest")
_MODES = ("min", "max")
_WHICH = "'latest', 'best:<metric>' (lowest), 'best:<metric>:max', or a step number"


@attrs.frozen
class CheckpointInfo:
    """One committed checkpoint: a run's ``iter_*`` iteration, or a committed unit of a
    framework integration (a Lightning ``*.ckpt``, a Hugging Face ``checkpoint-N``).

    Attributes:
        step: its optimizer step (the iteration: ``iter_<9 digits>``; a unit's recorded
            global step, ``-1`` when its framework recorded none).
        state: ``"committed"``, ``"evaluation_pending"``, ``"publication_pending"``,
            ``"published"`` or ``"weights_only"`` (optimizer state removed by retention: it
            loads with ``load_weights``, it is not a resume source).
        metrics: the validation metrics recorded with it (``{}``: none recorded); for a
            Lightning checkpoint its ``ModelCheckpoint`` monitor's score, for a Hugging Face
            one the values ``trainer_state.json`` logged at its step.
        size_bytes: the bytes of the files its manifest records (a weights-only one without
            its removed optimizer files).
        path: its ``iter_*`` directory; a Lightning checkpoint's familiar path (what
            ``best_model_path`` names); a ``checkpoint-N`` folder.
        attempt: the attempt (``RUN_TS``) holding it (``None``: a legacy flat
            ``checkpoints/``, a ``checkpoints/`` dir given directly, or a unit).
        framework: ``"statecraft"`` (an iteration), ``"lightning"`` or ``"hf-trainer"``.
        unit: the committed unit directory holding its files (a Lightning slot's
            generation ``.statecraft/<name>/g<8 digits>``); ``path`` for the others.
    """

    step: int
    state: str
    metrics: Mapping[str, float]
    size_bytes: int
    path: Path
    attempt: str | None
    framework: str = "statecraft"
    unit: Path = attrs.field(default=attrs.Factory(lambda self: self.path, takes_self=True))

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
