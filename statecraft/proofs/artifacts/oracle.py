"""The independent oracle of the artifact checks: raw bytes of ``checkpoint_artifacts/``.

Like :mod:`statecraft.proofs.oracle` for checkpoints, it parses the artifact manifest JSON
itself, hashes every file itself (:func:`~statecraft.proofs.oracle.digest_of`) and loads each
payload itself (``torch.load(weights_only=True)`` of the raw bytes), instead of calling the
production decoding and verification it judges. It also holds the artifact damages the
scenarios apply in their setup (raw bytes, no production code).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from statecraft.proofs.oracle import (
    CHECKPOINTS_ROOT,
    MANIFEST,
    digest_of,
    iteration_name,
    load_payload,
    recorded_digest,
)
from statecraft.storage.sim import SimWorld

__all__ = [
    "ARTIFACTS_ROOT",
    "ARTIFACT_MANIFEST",
    "ArtifactView",
    "foreign_manifest",
    "garbage_artifact_manifest",
    "partial_artifact",
    "tree_of",
]

ARTIFACTS_ROOT = posixpath.join(posixpath.dirname(CHECKPOINTS_ROOT), "checkpoint_artifacts")
ARTIFACT_MANIFEST = ".posttrain-checkpoint-artifact.json"
_SCHEMA = "statecraft.artifact-manifest.v1"
_ITER = re.compile(r"^iter_(\d{9})$")
_FAMILIES = {"model": ["model"], "optimizer": ["optim"], "training_state": ["trainer", "data"]}
_OLD_REF = ["old", "ref"]


def tree_of(world: SimWorld, root: str) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes); empty when ``root`` is absent."""
    return world.fs.tree(root) if world.fs.stat(root) is not None else {}


def expected_physical(components: Sequence[str]) -> list[str]:
    """The physical families the contract expands ``components`` to (spelled here, not
    imported from the production plan)."""
    out: list[str] = []
    for c in components:
        out += _FAMILIES[c] + (_OLD_REF if c == "training_state" else [])
    return out


@attrs.frozen
class ArtifactView:
    """``checkpoint_artifacts/`` as a process would read it at one moment.

    Attributes:
        files: relative path -> bytes, every file under the root.
        names: the root's entries (empty ``iter_*`` directories included).
        present: the root directory exists.
    """

    files: dict[str, bytes]
    names: tuple[str, ...]
    present: bool

    @classmethod
    def of(cls, world: SimWorld) -> ArtifactView:
        fs = world.fs
        if fs.stat(ARTIFACTS_ROOT) is None:
            return cls({}, (), False)
        return cls(fs.tree(ARTIFACTS_ROOT), tuple(fs.listdir(ARTIFACTS_ROOT)), True)

    def iterations(self) -> list[int]:
        found = (m for m in (_ITER.match(n) for n in self.names) if m)
        return sorted(int(m.group(1)) for m in found)

    def manifest_raw(self, iteration: int) -> bytes | None:
        return self.files.get(f"{iteration_name(iteration)}/{ARTIFACT_MANIFEST}")

    def manifest(self, iteration: int) -> dict[str, Any] | None:
        """The parsed manifest (None when absent or not a JSON object with ``files``)."""
        raw = self.manifest_raw(iteration)
        try:
            data = json.loads(raw) if raw is not None else None
        except ValueError:
            return None
        return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else None

    def committed(self, iteration: int) -> bool:
        """``iteration`` holds a parseable artifact manifest of this iteration (the commit)."""
        data = self.manifest(iteration)
        return data is not None and data.get("schema") == _SCHEMA

    def committed_files(self, iteration: int) -> dict[str, bytes | None]:
        """Relative path -> bytes of every committed name of ``iteration`` (the manifest and
        every file it lists; None for a listed file that is missing)."""
        data = self.manifest(iteration)
        if data is None:
            return {}
        name = iteration_name(iteration)
        paths = [f"{name}/{ARTIFACT_MANIFEST}", *(f"{name}/{f}" for f in data["files"])]
        return {p: self.files.get(p) for p in paths}

    def problem(
        self, iteration: int, components: Sequence[str], files: Sequence[str]
    ) -> str | None:
        """Why ``iteration`` is not a complete, intact, loadable artifact of exactly
        ``components`` with exactly ``files`` (None if it is)."""
        name = iteration_name(iteration)
        data = self.manifest(iteration)
        if data is None:
            return f"{name} has no readable artifact manifest"
        try:
            if data["schema"] != _SCHEMA or data["iteration"] != iteration:
                return (
                    f"{name} manifest says schema {data['schema']!r}, iteration {data['iteration']}"
                )
            if data["components"] != list(components):
                return (
                    f"{name} manifest names components {data['components']}, not {list(components)}"
                )
            if data["physical"] != expected_physical(components):
                return f"{name} manifest names physical {data['physical']}"
            entries = {f: (int(e["size"]), recorded_digest(e)) for f, e in data["files"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return f"{name} artifact manifest unreadable: {exc!r}"
        if sorted(entries) != sorted(files):
            return f"{name} manifest records {sorted(entries)}, not the plan's {sorted(files)}"
        for file_name, (size, (algorithm, value)) in sorted(entries.items()):
            raw = self.files.get(f"{name}/{file_name}")
            if raw is None:
                return f"{name}/{file_name} is missing"
            if len(raw) != size or digest_of(raw, algorithm) != value:
                return f"{name}/{file_name} does not match its manifest ({len(raw)} bytes)"
            loaded, payload = load_payload(raw)
            if not loaded:
                return f"{name}/{file_name} does not load with weights_only=True ({payload})"
        if "model.pt" in entries:
            weight = load_payload(self.files[f"{name}/model.pt"])[1]["weight"]
            if any(float(w) != float(iteration) for w in weight.flatten().tolist()):
                return f"{name}/model.pt holds the weights of another step"
        return None

    def temporaries(self) -> list[str]:
        return [p for p in self.files if ".tmp-" in p.rsplit("/", 1)[-1]]


# ------------------------------------------------------------------------- damages
Damage = Callable[[SimWorld], None]


def _put(world: SimWorld, rel: str, data: bytes) -> None:
    world.fs.makedirs(posixpath.dirname(f"{ARTIFACTS_ROOT}/{rel}"))
    handle = world.fs.open_write(f"{ARTIFACTS_ROOT}/{rel}", exclusive=False)
    world.fs.write(handle, data)
    world.fs.close(handle)


def partial_artifact(iteration: int) -> Damage:
    """A killed artifact save's leftovers: a half file and a writer temporary, no manifest."""

    def damage(world: SimWorld) -> None:
        _put(world, f"{iteration_name(iteration)}/model.pt", b"half a model from a killed save")
        _put(world, f"{iteration_name(iteration)}/.model.pt.tmp-1-1", b"torn")

    return damage


def garbage_artifact_manifest(iteration: int) -> Damage:
    """A damaged artifact manifest (truncated JSON) beside a model file."""

    def damage(world: SimWorld) -> None:
        _put(world, f"{iteration_name(iteration)}/model.pt", b"a model")
        _put(world, f"{iteration_name(iteration)}/{ARTIFACT_MANIFEST}", b'{"schema": "statecr')

    return damage


def foreign_manifest(iteration: int) -> Damage:
    """An artifact directory holding a full-checkpoint manifest (copied there by hand)."""

    def damage(world: SimWorld) -> None:
        source = f"{CHECKPOINTS_ROOT}/{iteration_name(2)}/{MANIFEST}"
        _put(world, f"{iteration_name(iteration)}/{MANIFEST}", world.fs.read(source))

    return damage
