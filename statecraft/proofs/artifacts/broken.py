"""The deliberately wrong artifact saves ``specs/artifact.toml`` declares (``[[broken]]``):
each returns the scenarios that run one wrong variant (a swapped table, or a guard, effect or
observer replaced through ``Bindings.merged``), and ``statecraft crashcheck --broken`` fails
unless exploring them violates the guarantees the spec says it must."""

from __future__ import annotations

import io
import tomllib
from collections.abc import Callable
from typing import Any

import attrs
import torch

from statecraft.checkpoint.artifacts import bindings as art
from statecraft.checkpoint.kernel.artifact_manifest import (
    ARTIFACT_MANIFEST_SCHEMA,
    ArtifactManifest,
)
from statecraft.checkpoint.kernel.layout import (
    ARTIFACT_MANIFEST_NAME,
    LATEST_POINTER,
    format_latest,
)
from statecraft.checkpoint.kernel.machines import load_machine, machine_bindings
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.engine import Bindings, Machine, parse_table
from statecraft.proofs.artifacts.scenarios import ArtifactScenario, artifact_scenarios
from statecraft.proofs.oracle import CHECKPOINTS_ROOT
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.training import SALT_RUN
from statecraft.resources import machine_path
from statecraft.storage import LocalStore
from statecraft.storage.digest import Digest

__all__ = [
    "artifact_moves_latest",
    "cadence_validation_moved_before_the_commit",
    "committed_artifact_taken_for_leftovers",
    "evaluation_first_ignored",
    "leftovers_taken_for_a_committed_artifact",
    "manifest_committed_before_the_payload_files",
    "manifest_published_by_replace",
    "manifest_written_in_place",
    "saved_as_a_full_checkpoint",
    "scenario",
    "with_bindings",
]


def scenario(name: str, machine: Callable[[], Machine]) -> list[ArtifactScenario]:
    """The shipped scenario ``name`` run by ``machine``."""
    base = next(s for s in artifact_scenarios() if s.name == name)
    return [attrs.evolve(base, name=f"broken-{name}", calls=[], machine_factory=machine)]


def with_bindings(
    *,
    effects: dict[str, Callable[..., Any]] | None = None,
    observers: dict[str, Callable[..., Any]] | None = None,
    guards: dict[str, Callable[..., Any]] | None = None,
) -> Callable[[], Machine]:
    """The shipped table with the given bindings replacing its own."""

    def build() -> Machine:
        merged = machine_bindings("artifact").merged(
            Bindings(effects=effects or {}, observers=observers or {}, guards=guards or {})
        )
        return Machine(load_machine("artifact").table, merged)

    return build


# ------------------------------------------------------------------------ wrong orders
def _manifest_before_files(ctx: Any) -> None:
    """Broken write_files: the manifest (digests computed in memory) is committed first,
    then the files are written."""
    files = {}
    for name in ctx.files:
        buffer = io.BytesIO()
        torch.save(ctx.staged[name], buffer)
        data = buffer.getvalue()
        files[name] = (data, FileEntry(len(data), Digest.of(data)))
    manifest = ArtifactManifest(
        schema=ARTIFACT_MANIFEST_SCHEMA,
        iteration=ctx.iteration,
        format="consolidated",
        components=ctx.plan.components,
        physical=ctx.plan.physical,
        files={n: e for n, (_, e) in files.items()},
    )
    ctx.store.create_exclusive(ctx.path(ARTIFACT_MANIFEST_NAME), manifest.encode())
    for name, (data, _) in files.items():
        ctx.store.write_atomic(ctx.path(name), data)


def _no_commit(ctx: Any) -> None:
    """The manifest is written by the broken write_files already."""


def manifest_committed_before_the_payload_files() -> list[ArtifactScenario]:
    """The manifest committed before the files it lists are written."""
    machine = with_bindings(
        effects={"write_files": _manifest_before_files, "commit_manifest": _no_commit}
    )
    return scenario("model-artifact", machine)


def _validation_before_the_commit() -> Machine:
    """The artifact table with the cadence path's commit and ephemeral evaluation exchanged
    (``files_durable [evaluate_after]`` evaluates, then ``committed_unevaluated`` commits)."""
    data: dict[str, Any] = tomllib.loads(machine_path("artifact").read_text())
    first = next(t for t in data["transitions"] if t.get("guard") == "evaluate_after")
    second = next(t for t in data["transitions"] if t["do"] == "evaluate_after_commit")
    first["do"], second["do"] = second["do"], first["do"]
    return Machine(parse_table(data, source="broken artifact table"), machine_bindings("artifact"))


def cadence_validation_moved_before_the_commit() -> list[ArtifactScenario]:
    """The cadence artifact's ephemeral validation run before its commit: a failed validation
    discards the due artifact."""
    return scenario("cadence-artifact-then-validation-fails", _validation_before_the_commit)


def evaluation_first_ignored() -> list[ArtifactScenario]:
    """Guards that treat an artifact requested by validation alone like a cadence one (commit,
    then evaluate): a failed evaluation leaves it committed."""
    machine = with_bindings(
        guards={
            "evaluate_first": lambda ctx: False,
            "evaluate_after": lambda ctx: ctx.evaluation is not None,
        }
    )
    return scenario("validation-only-partial-fails-then-retry-passes", machine)


# ------------------------------------------------------------------------ wrong observations
def _committed_as_partial(ctx: Any) -> str:
    """Broken observe: a committed artifact is taken for leftovers (and rewritten)."""
    label = art.observe_artifact(ctx)
    return "partial" if label == "committed" else label


def committed_artifact_taken_for_leftovers() -> list[ArtifactScenario]:
    """A committed artifact taken for leftovers: the save clears and rewrites it."""
    machine = with_bindings(observers={"observe_artifact": _committed_as_partial})
    return scenario("second-save-to-committed-step", machine)


def _partial_as_committed(ctx: Any) -> str:
    """Broken observe: a directory of the step is taken for a committed artifact (its
    manifest is not asked for)."""
    label = art.observe_artifact(ctx)
    return "committed" if label == "partial" else label


def leftovers_taken_for_a_committed_artifact() -> list[ArtifactScenario]:
    """A killed save's leftovers taken for a committed artifact: the retry refuses instead of
    finishing it."""
    machine = with_bindings(observers={"observe_artifact": _partial_as_committed})
    return scenario("model-artifact", machine)


# ------------------------------------------------------------------------ wrong writes
def _commit_by_replace(ctx: Any) -> None:
    """Broken commit_manifest: the manifest is published by atomic replace (rename), which
    succeeds over an existing manifest, instead of by exclusive create."""
    art.require_written(
        sorted(ctx.files), ctx.records, where=ctx.where, retry="Retry the artifact save."
    )
    manifest = ArtifactManifest(
        schema=ARTIFACT_MANIFEST_SCHEMA,
        iteration=ctx.iteration,
        format="consolidated",
        components=ctx.plan.components,
        physical=ctx.plan.physical,
        files={n: FileEntry(r.size, r.digest) for n, r in sorted(ctx.records.items())},
        metrics=dict(ctx.metrics) if ctx.evaluate_first and ctx.metrics is not None else None,
        writer={**ctx.writer.finish(), **ctx.writer_info},
    )
    ctx.fenced.write_atomic(ctx.path(ARTIFACT_MANIFEST_NAME), manifest.encode())


def manifest_published_by_replace() -> list[ArtifactScenario]:
    """The manifest published by rename instead of exclusive link."""
    return scenario(
        "model-artifact", with_bindings(effects={"commit_manifest": _commit_by_replace})
    )


def _commit_and_move_latest(ctx: Any) -> None:
    """Broken commit_manifest: the committed artifact also moves latest_checkpoint.txt (as
    a full checkpoint's commit does)."""
    art.commit_manifest(ctx)
    checkpoints = LocalStore(CHECKPOINTS_ROOT, fs=ctx.store.fs)
    checkpoints.write_atomic(LATEST_POINTER, format_latest(ctx.iteration))


def artifact_moves_latest() -> list[ArtifactScenario]:
    """An artifact commit that moves latest_checkpoint.txt to its step."""
    return scenario(
        "model-artifact", with_bindings(effects={"commit_manifest": _commit_and_move_latest})
    )


def _commit_in_place(ctx: Any) -> None:
    """Broken commit_manifest: the manifest is written straight under its name (no complete
    temporary linked into place): a crash mid-write leaves a torn commit record."""
    art.require_written(
        sorted(ctx.files), ctx.records, where=ctx.where, retry="Retry the artifact save."
    )
    ctx.store.settle()
    manifest = ArtifactManifest(
        schema=ARTIFACT_MANIFEST_SCHEMA,
        iteration=ctx.iteration,
        format="consolidated",
        components=ctx.plan.components,
        physical=ctx.plan.physical,
        files={n: FileEntry(r.size, r.digest) for n, r in sorted(ctx.records.items())},
        writer={**ctx.writer.finish(), **ctx.writer_info},
    )
    store = ctx.store
    data = manifest.encode()
    handle = store.fs.open_write(store.abspath(ctx.path(ARTIFACT_MANIFEST_NAME)), exclusive=True)
    half = len(data) // 2
    store.fs.write(handle, data[:half])
    store.fs.write(handle, data[half:])
    store.fs.fsync(handle)
    store.fs.close(handle)
    store.fs.fsync_dir(store.abspath(ctx.iter_dir))


def manifest_written_in_place() -> list[ArtifactScenario]:
    """The manifest written in place: a crash mid-write leaves a torn manifest the retry
    cannot finish (it refuses it as corrupt)."""
    return scenario("model-artifact", with_bindings(effects={"commit_manifest": _commit_in_place}))


def _save_as_checkpoint(ctx: Any) -> None:
    """Broken write_files: the artifact request is routed to the full save (under
    checkpoints/, moving latest) instead of checkpoint_artifacts/."""
    checkpoints = LocalStore(CHECKPOINTS_ROOT, fs=ctx.store.fs)
    save = save_context(checkpoints, ctx.iteration, with_data=False, salt=SALT_RUN)
    shipped_machine("save").recover(save).raise_for_failure()


def saved_as_a_full_checkpoint() -> list[ArtifactScenario]:
    """The artifact saved as a full checkpoint: checkpoints/ changes and resume adopts a step
    the setup never committed as a full checkpoint."""
    return scenario(
        "model-artifact",
        with_bindings(effects={"write_files": _save_as_checkpoint, "commit_manifest": _no_commit}),
    )
