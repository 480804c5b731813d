"""What the demo reads from disk, through the checkpoint catalog and the layout's RUN_TS rule
(the same answers resume and ``statecraft inspect`` get): the run's checkpoints dir, its
committed iterations, and what a kill left behind."""

from __future__ import annotations

import os
from pathlib import Path

from statecraft.checkpoint.kernel.catalog import CheckpointState, LatestState, classify, scan
from statecraft.checkpoint.kernel.layout import (
    CHECKPOINTS_DIR,
    LATEST_POINTER,
    iter_dirname,
    newest_attempt,
)
from statecraft.checkpoint.kernel.validation_records import PUBLISHED_RECORD
from statecraft.cli.demo.records import Launch
from statecraft.cli.demo_train import DEMO_RUN
from statecraft.storage.local import LocalStore

__all__ = [
    "checkpoints_dir",
    "committed_iterations",
    "inspect_after_kill",
    "published_iterations",
    "save_state",
    "validation_state",
]

#: the catalog states of a checkpoint resume may adopt (committed, with its validation stage)
ADOPTABLE = frozenset(
    {
        CheckpointState.COMMITTED,
        CheckpointState.EVALUATION_PENDING,
        CheckpointState.PUBLICATION_PENDING,
        CheckpointState.PUBLISHED,
    }
)


def checkpoints_dir(root: str | os.PathLike[str]) -> Path | None:
    """The demo run's ``checkpoints/`` under output root ``root`` (newest attempt), or None."""
    job = DEMO_RUN.job_dir(Path(root))
    newest = newest_attempt(job)
    return job / newest / CHECKPOINTS_DIR if newest is not None else None


def _store(directory: Path) -> LocalStore:
    return LocalStore(str(directory.resolve()))


def committed_iterations(directory: Path | None) -> list[int]:
    """Iterations under ``directory`` whose manifest is the commit (catalog level
    ``"manifest"``), oldest first; weights-only ones (their optimizer state removed by
    retention) are committed checkpoints too."""
    if directory is None or not directory.is_dir():
        return []
    catalog = scan(_store(directory), level="manifest")
    kept = (CheckpointState.COMMITTED, CheckpointState.WEIGHTS_ONLY)
    return sorted(e.iteration for e in catalog.entries() if e.state in kept)


def published_iterations(directory: Path | None) -> list[int]:
    """Iterations under ``directory`` whose validation is published (verified at digest
    level), oldest first; a published checkpoint that retention made weights-only (its
    optimizer state removed, its published record kept) still counts."""
    if directory is None or not directory.is_dir():
        return []
    catalog = scan(_store(directory), level="digest")
    return sorted(
        e.iteration
        for e in catalog.entries()
        if e.state is CheckpointState.PUBLISHED
        or (
            e.state is CheckpointState.WEIGHTS_ONLY
            and (directory / e.name / PUBLISHED_RECORD).is_file()
        )
    )


def validation_state(directory: Path, iteration: int) -> str:
    """The catalog state of ``iteration`` (``evaluation_pending``, ``publication_pending``,
    ``published``, ``committed``, ``partial``, ...)."""
    return str(classify(_store(directory), iteration, level="digest").state.value)


def inspect_after_kill(launch: Launch, directory: Path | None) -> None:
    """Record what a kill left: the latest pointer, whether it verifies, partial iterations,
    and the stage of a validation the kill interrupted."""
    if launch.last_line and launch.last_line.startswith("save-begin"):
        launch.killed_in_save = int(launch.last_line.split()[1])
    if launch.trigger and launch.trigger.startswith("evaluated"):
        launch.killed_in_validation = int(launch.trigger.split()[1])
        launch.killed_in_save = None
    if directory is None or not directory.is_dir():
        return
    store = _store(directory)
    if launch.killed_in_save is not None:
        launch.save_state = save_state(directory, launch.killed_in_save)
    if launch.killed_in_validation is not None:
        launch.validation_state = validation_state(directory, launch.killed_in_validation)
    catalog = scan(store, level="manifest")
    launch.partial = sorted(e.name for e in catalog.entries() if e.state is CheckpointState.PARTIAL)
    latest = catalog.latest
    if latest.state is LatestState.MISSING:
        return
    launch.latest = latest.iteration
    if latest.state is not LatestState.OK or latest.iteration is None:
        launch.latest_verified = False
        launch.latest_problem = latest.problem or latest.note
        return
    entry = classify(store, latest.iteration, level="digest")
    launch.latest_verified = entry.state in ADOPTABLE
    if not launch.latest_verified:
        launch.latest_problem = entry.reason


def save_state(directory: Path, iteration: int) -> str:
    """What a save interrupted by a kill left on disk for ``iteration``."""
    store = _store(directory)
    entry = classify(store, iteration, level="manifest")
    if entry.state is CheckpointState.ABSENT:
        return "nothing on disk yet (killed before its directory was created)"
    if entry.state is not CheckpointState.PARTIAL:  # a manifest is there (the commit)
        latest = scan(store, level="manifest").latest
        pointer = (
            "advanced"
            if latest.state is LatestState.OK and latest.iteration == iteration
            else "not yet advanced"
        )
        return f"committed (manifest written), {LATEST_POINTER} {pointer}"
    names = store.list(iter_dirname(iteration))
    files = [n for n in names if n.endswith(".pt")]
    temps = [n for n in names if ".tmp-" in n]
    text = f"partial: {', '.join(files) or 'no file'} complete"
    if temps:
        text += f", {len(temps)} half-written temporary file(s)"
    return text + ", no manifest (never adopted)"
