"""Artifact verification: prove that one ``checkpoint_artifacts/iter_N`` is a committed, intact
partial artifact whose files load the way a reader loads them.

The artifact counterpart of :func:`~statecraft.checkpoint.kernel.verify.verify_checkpoint`. Readers
that need it: :func:`statecraft.load_weights` (an artifact directory as its source), the
artifact catalog, ``statecraft inspect`` and the artifact transaction's observation. ``store``
is the ``checkpoint_artifacts`` root; nothing is written, and a reader never creates that root
(stat it before building a ``LocalStore`` on it).

Levels, each including the previous (:data:`~statecraft.checkpoint.kernel.verify.LEVELS`):

- ``"manifest"``: no full-checkpoint manifest (``.posttrain-manifest.json``) sits in the
  directory, and the artifact manifest (``.posttrain-checkpoint-artifact.json``) exists,
  parses, names this iteration and a partial plan (no file is opened);
- ``"size"``: the manifest's format is the writer's, it records exactly the files of its plan
  (:meth:`~statecraft.checkpoint.kernel.components.ComponentPlan.files`: every required entry of its
  components, ``data.pt`` optional with ``training_state``, nothing else), every recorded file
  is a regular file of its recorded size, **every file deserializes through the writer with
  ``weights_only=True``**, and ``trainer.pt`` (when the plan has ``training_state``) is a
  well-formed :class:`~statecraft.checkpoint.state.TrainerState` whose ``optimizer_step``
  equals the iteration;
- ``"digest"``: every hashed file's digest equals the recorded one too.

Every refusal is a :class:`~statecraft.errors.CheckpointCorruptError` naming the directory or
file, the problem and what to do (or a :class:`~statecraft.errors.TrainerStateError` for a
malformed ``trainer.pt``). An artifact is never a resume source; a verified one is only ever
loaded for evaluation or sampling.
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from statecraft.checkpoint.kernel.artifact_manifest import ArtifactManifest, read_artifact_manifest
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.listed_files import first_listed_mismatch
from statecraft.checkpoint.kernel.plan import CHECKPOINT_PLAN, TRAINER_ENTRY
from statecraft.checkpoint.kernel.verify import (
    ParsedPayloads,
    check_level,
    parse_entries,
    read_trainer,
)
from statecraft.checkpoint.state import TrainerState
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store
from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = ["VerifiedArtifact", "artifact_plan_problems", "verify_artifact"]

_MOVE_ASIDE = "Move the directory aside; an artifact is never a resume source"
_REWRITE = "The artifact is damaged; write a new one or load another checkpoint or artifact."


@attrs.frozen
class VerifiedArtifact:
    """A partial artifact whose integrity was proven at some level.

    Attributes:
        store: the ``checkpoint_artifacts`` root store.
        where: ``<store>/iter_<9 digits>`` as the store describes it (``local:/...``).
        manifest: its committed artifact manifest (plan: ``manifest.plan``).
        trainer: its parsed ``trainer.pt``; ``None`` at level ``"manifest"`` or when the plan
            has no ``training_state``.
        payloads: entry name -> parsed payload, for the entries verification parsed when
            ``keep_payloads`` (never ``trainer.pt``: see ``trainer``); empty otherwise or
            after pickling.
    """

    store: Store
    iteration: int
    where: str
    manifest: ArtifactManifest
    trainer: TrainerState | None = None
    payloads: ParsedPayloads = attrs.field(factory=ParsedPayloads, eq=False, repr=False)

    def path(self, name: str) -> str:
        """The store path of entry ``name`` of this artifact."""
        return f"{iter_dirname(self.iteration)}/{name}"


def artifact_plan_problems(manifest: ArtifactManifest, writer: Writer) -> list[str]:
    """Every way ``manifest``'s files disagree with its plan and ``writer``, one line each
    (empty when it records exactly the files its plan writes in ``writer``'s format)."""
    plan = manifest.plan
    problems = []
    if manifest.format != writer.format_name:
        problems.append(
            f"it records format {manifest.format!r} but is read by {writer!r}, which reads "
            f"{writer.format_name!r} files"
        )
    required = plan.files(with_data=False)
    allowed = plan.files(with_data=True)
    missing = [n for n in required if n not in manifest.files]
    if missing:
        problems.append(f"it lacks {missing}, required by its plan {plan}")
    extra = sorted(n for n in manifest.files if n not in allowed)
    if extra:
        problems.append(
            f"it records {extra}, which {'is' if len(extra) == 1 else 'are'} not written by "
            f"its plan {plan} (entries {list(allowed)})"
        )
    return problems


def _committed_manifest(store: Store, iteration: int, where: str) -> ArtifactManifest:
    name = iter_dirname(iteration)
    if store.stat(f"{name}/{MANIFEST_NAME}") is not None:
        raise CheckpointCorruptError(
            where,
            f"is an artifact directory holding a full-checkpoint manifest ({MANIFEST_NAME}); "
            "a full checkpoint lives under checkpoints/, never under checkpoint_artifacts/",
            f"{_MOVE_ASIDE}; it was copied or renamed by hand or written by another tool.",
        )
    if store.stat(f"{name}/{ARTIFACT_MANIFEST_NAME}") is None:
        raise CheckpointCorruptError(
            where,
            f"has no artifact manifest ({ARTIFACT_MANIFEST_NAME}): not committed (an "
            "interrupted artifact save, or no artifact at this step)",
            "It is never read; the next artifact save at this step clears it.",
        )
    return read_artifact_manifest(store, iteration)


def verify_artifact(
    store: Store,
    iteration: int,
    *,
    level: str = "digest",
    writer: Writer | None = None,
    keep_payloads: bool = False,
    only: Collection[str] | None = None,
) -> VerifiedArtifact:
    """Prove that artifact ``iteration`` in ``store`` (the ``checkpoint_artifacts`` root) is
    committed and intact at ``level`` (see the module docstring). Reads only; writes nothing.

    Args:
        writer: the format's reader (default :class:`ConsolidatedWriter`).
        keep_payloads: keep the parsed entries on the result (``load_weights`` takes
            ``model.pt`` from it); otherwise each file is parsed memory-mapped where the
            store allows it and dropped.
        only: hash and parse only these entries (and ``trainer.pt``, always, when recorded);
            every recorded file is still required with its recorded size. ``None``: every
            entry.

    Raises:
        CheckpointCorruptError: the first problem found: a full-checkpoint manifest in the
            directory; no artifact manifest ("not committed"); a malformed manifest or one
            naming another iteration; files that disagree with the plan or the writer's
            format; a file missing, not a regular file, of another size or digest, or not
            loadable with ``weights_only=True``; ``trainer.pt`` recording another
            ``optimizer_step``.
        TrainerStateError: ``trainer.pt`` is malformed.
        CheckpointError: ``level`` is not one of
        :data:`~statecraft.checkpoint.kernel.verify.LEVELS`.
    """
    check_level(level)
    writer = writer or ConsolidatedWriter()
    name = iter_dirname(iteration)
    where = f"{store.describe()}/{name}"
    manifest = _committed_manifest(store, iteration, where)
    if level == "manifest":
        return VerifiedArtifact(store, iteration, where, manifest)
    problems = artifact_plan_problems(manifest, writer)
    if problems:
        raise CheckpointCorruptError(
            where,
            "the artifact manifest does not describe its plan: " + "; ".join(problems),
            f"{_MOVE_ASIDE}; it was edited by hand or written by another tool.",
        )
    wanted = [n for n in sorted(manifest.files) if only is None or n in only or n == TRAINER_ENTRY]
    mismatch = first_listed_mismatch(
        store, name, manifest.files, hashed=lambda n: level == "digest" and n in wanted
    )
    if mismatch is not None:
        raise mismatch.error("the artifact manifest", fixes=(_REWRITE, _REWRITE, _REWRITE))
    trainer = None
    if TRAINER_ENTRY in manifest.files:
        trainer = read_trainer(store, writer, iteration, where=where, fix=_MOVE_ASIDE + ".")
    payloads = parse_entries(
        store,
        writer,
        iteration,
        [n for n in wanted if n != TRAINER_ENTRY],
        CHECKPOINT_PLAN,
        keep_payloads=keep_payloads,
    )
    return VerifiedArtifact(store, iteration, where, manifest, trainer, payloads)
