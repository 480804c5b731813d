"""The resume rules that partial artifacts impose, shared by the resume bindings
(:mod:`statecraft.checkpoint.resume.bindings`) and ``statecraft inspect``'s "resume=auto
would" line (:func:`auto_outcome`): one rule, not two readings of it.

A committed artifact ``checkpoint_artifacts/iter_N`` is never a resume source, but it marks a
step the run reached. Resuming from a full checkpoint older than ``N`` (or starting fresh in
an attempt that holds it) would train into a save collision at ``N`` and mix two trajectories
in one attempt. So:

- ``resume=auto`` refuses when the attempt holds an artifact with a manifest (committed, or
  corrupt: fail closed) and no resumable checkpoint, or only checkpoints older than the newest
  such artifact;
- an explicit source must be at or beyond the newest artifact: its iteration is the ``iter_*``
  segment, else (a legacy ``.pt``) its verified trainer state's ``optimizer_step``; behind it,
  or with no derivable iteration, it is refused;
- an explicit source that is itself an artifact (a path under ``checkpoint_artifacts/``, or a
  directory holding an artifact manifest) is refused: load its weights with
  ``statecraft.load_weights`` instead.

Every refusal is an :class:`~statecraft.errors.ArtifactResumeError` naming the artifact
directory, the checkpoint (or "no resumable checkpoint") and the fixes. Nothing here writes.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from statecraft.checkpoint.kernel.artifact_catalog import (
    ArtifactCatalog,
    ArtifactEntry,
    ArtifactState,
)
from statecraft.checkpoint.kernel.catalog import Catalog, CatalogEntry, PassedOver
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, ARTIFACTS_DIR
from statecraft.errors import ArtifactResumeError
from statecraft.storage.filesystem import Filesystem

__all__ = ["AutoOutcome", "artifact_refusal", "artifact_source_refusal", "auto_outcome"]


def _describe(artifact: ArtifactEntry) -> str:
    if artifact.state is ArtifactState.COMMITTED:
        components = list(artifact.components)
        return f"committed partial artifact {artifact.path} (components {components})"
    if artifact.state is ArtifactState.RELEASED:
        return f"partial artifact {artifact.path}, {artifact.reason}"
    return (
        f"partial artifact {artifact.path}, whose manifest is there but which does not verify "
        f"({artifact.reason}; counted anyway: a damaged commit is still a step the run reached)"
    )


def _fixes(artifact: ArtifactEntry) -> str:
    return (
        "Nothing was loaded. To go on: start a new attempt with resume=off; or resume "
        f"explicitly from a full checkpoint at or beyond {artifact.name}; or, for a warm start "
        "in a new attempt (resume=off), load the artifact's weights with "
        f"statecraft.load_weights(model, {artifact.path!r})"
    )


def artifact_refusal(
    artifact: ArtifactEntry | None,
    *,
    source: str,
    checkpoint: str | None,
    iteration: int | None,
) -> ArtifactResumeError | None:
    """The refusal of resuming ``checkpoint`` (at ``iteration``) under ``source`` (the
    resume setting, ``"resume=auto"`` or ``"resume=<path>"``) given the attempt's newest
    artifact with a manifest, or ``None`` when the resume may go on.

    Args:
        artifact: :meth:`ArtifactCatalog.newest_with_manifest` of the attempt (``None``: no
            artifact counts; nothing is refused).
        checkpoint: the checkpoint resume would load; ``None`` when there is no resumable one
            (``resume=auto`` would start fresh).
        iteration: its iteration; ``None`` with a ``checkpoint`` when none can be derived
            (a legacy file without trainer state).
    """
    if artifact is None or (iteration is not None and iteration >= artifact.iteration):
        return None
    what = _describe(artifact)
    if checkpoint is None:
        reason = "no_checkpoint"
        problem = (
            f"the attempt holds the {what} but no resumable checkpoint (checkpoint: none), so "
            f"a fresh start would train into a save collision at {artifact.name}"
        )
    elif iteration is None:
        reason = "no_iteration"
        problem = (
            f"the iteration of checkpoint {checkpoint} cannot be derived (no iter_* segment and "
            f"no trainer state), so it cannot be shown to be at or beyond the {what}"
        )
    else:
        reason = "behind_artifact"
        problem = (
            f"checkpoint {checkpoint} (iteration {iteration}) is older than the {what} "
            f"(iteration {artifact.iteration}); resuming it would train into a save collision "
            f"at {artifact.name}"
        )
    return ArtifactResumeError(
        f"{source} refused: {problem}. {_fixes(artifact)}",
        artifact=artifact.path,
        checkpoint=checkpoint,
        reason=reason,
    )


def artifact_source_refusal(
    path_text: str, fs: Filesystem, newest: ArtifactEntry | None
) -> ArtifactResumeError | None:
    """The refusal of an explicit resume source that is itself an artifact: a path under
    ``checkpoint_artifacts/`` (the directory, an ``iter_*`` in it, or a file in one) or a
    directory holding an artifact manifest; ``None`` otherwise (including a path that does
    not exist: resolving it reports that). Reads through ``fs`` only."""
    path = Path(path_text).expanduser().absolute()
    stat = fs.stat(str(path))
    if stat is None:
        return None
    directory = path if stat.is_dir else path.parent
    under = ARTIFACTS_DIR in (directory.name, directory.parent.name)
    if not under and fs.stat(str(directory / ARTIFACT_MANIFEST_NAME)) is None:
        return None
    beyond = (
        f"a full checkpoint at or beyond {newest.name} (the attempt's newest artifact)"
        if newest is not None
        else "a full checkpoint under checkpoints/"
    )
    return ArtifactResumeError(
        f"resume={path_text} refused: {directory} is a partial artifact, not a resumable "
        "checkpoint (no checkpoint given); an artifact is never a resume source. Nothing was "
        "loaded. Load its weights for evaluation or a warm start with "
        f"statecraft.load_weights(model, {str(directory)!r}) in a new attempt (resume=off), "
        f"or resume from {beyond}",
        artifact=str(directory),
        checkpoint=None,
        reason="artifact_source",
    )


@attrs.frozen
class AutoOutcome:
    """What ``resume=auto`` does with an attempt, as far as the disk decides it (the tracked
    objects can still refuse a verified checkpoint at load time).

    Attributes:
        action: ``"adopt"``, ``"fresh"`` or ``"refuse"``.
        chosen: the checkpoint adopted (``adopt``), or the one refused for being behind the
            newest artifact (``refuse``); ``None`` otherwise.
        passed_over: newer iterations passed over, each with its reason.
        artifact: the attempt's newest artifact with a manifest, or ``None``.
        refusal: the refusal (``refuse``).
    """

    action: str
    chosen: CatalogEntry | None
    passed_over: tuple[PassedOver, ...]
    artifact: ArtifactEntry | None
    refusal: ArtifactResumeError | None = attrs.field(default=None, eq=False)

    @property
    def line(self) -> str:
        """``adopt iter_N (stage)`` / ``start fresh`` / ``refuse: <reason>``."""
        if self.action == "adopt" and self.chosen is not None:
            return f"adopt {self.chosen.name} ({self.chosen.state.value})"
        if self.action == "refuse":
            return f"refuse: {self.refusal}"
        return "start fresh"


def auto_outcome(catalog: Catalog | None, artifacts: ArtifactCatalog) -> AutoOutcome:
    """``resume=auto``'s decision for an attempt whose checkpoints are ``catalog`` (``None``:
    no ``checkpoints/``) and artifacts ``artifacts``: the catalog's pick, then
    :func:`artifact_refusal` — the rules the resume machine runs."""
    newest = artifacts.newest_with_manifest()
    pick = catalog.pick() if catalog is not None else None
    chosen = pick.chosen if pick is not None else None
    passed = pick.passed_over if pick is not None else ()
    refusal = artifact_refusal(
        newest,
        source="resume=auto",
        checkpoint=chosen.verified.location if chosen and chosen.verified else None,
        iteration=chosen.iteration if chosen is not None else None,
    )
    if refusal is not None:
        return AutoOutcome("refuse", chosen, passed, newest, refusal)
    return AutoOutcome("adopt" if chosen else "fresh", chosen, passed, newest)
