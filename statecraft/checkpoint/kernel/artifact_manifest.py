"""The artifact manifest: the commit record of one partial (non-resumable) artifact.

``checkpoint_artifacts/iter_<9 digits>/.posttrain-checkpoint-artifact.json`` is written last,
by exclusive create, and makes the artifact an immutable commit. It records the format, the
logical components and their physical families (:class:`~statecraft.checkpoint.kernel.components.
ComponentPlan`), every file with its size and the digest computed as the bytes were written,
and, for an artifact requested by validation that evaluated first, the metrics the evaluation
returned. It never names the full plan: a full plan is a checkpoint, not an artifact.

Schema ``statecraft.artifact-manifest.v1``::

    {"schema": "statecraft.artifact-manifest.v1", "iteration": 100, "format": "consolidated",
     "components": ["model"], "physical": ["model"],
     "files": {"model.pt": {"size": 123, "digest": {"algorithm": "xxh3_128", "value": "..."}}},
     "metrics": null, "writer": {"name": "consolidated", "statecraft": "0.1.0"}}
"""

from __future__ import annotations

import math

import attrs

from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.checkpoint.kernel.manifest import FileEntry, read_unit_manifest
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.errors import CheckpointError
from statecraft.storage.base import Store

__all__ = [
    "ARTIFACT_MANIFEST_SCHEMA",
    "ARTIFACT_MANIFEST_SCHEMA_FILE",
    "ArtifactManifest",
    "decode_artifact_manifest",
    "read_artifact_manifest",
]

ARTIFACT_MANIFEST_SCHEMA = "statecraft.artifact-manifest.v1"
#: its JSON schema (named by ``specs/artifact.toml``), enforced on encode and decode.
ARTIFACT_MANIFEST_SCHEMA_FILE = "artifact.manifest.schema.json"
_FIX = "The artifact is not usable; move it aside (it is never a resume source)."


@attrs.frozen
class ArtifactManifest:
    """The commit record of a partial artifact (see the module docstring).

    Attributes:
        metrics: metric name -> finite number, when validation evaluated before the commit;
            ``None`` otherwise.
    """

    schema: str
    iteration: int
    format: str
    components: tuple[str, ...]
    physical: tuple[str, ...]
    files: dict[str, FileEntry]
    metrics: dict[str, float] | None = None
    writer: dict[str, str] = attrs.field(factory=dict)

    @property
    def plan(self) -> ComponentPlan:
        return ComponentPlan.of(self.components)

    def problems(self) -> list[str]:
        """What makes this record not an artifact manifest (empty when it is one)."""
        out: list[str] = []
        if self.schema != ARTIFACT_MANIFEST_SCHEMA:
            out.append(f"schema {self.schema!r}, expected {ARTIFACT_MANIFEST_SCHEMA!r}")
        try:
            plan = ComponentPlan.of(self.components)
        except CheckpointError as exc:
            return [*out, str(exc)]
        if list(self.components) != list(plan.components):
            out.append(f"components {list(self.components)} are not in table order")
        if plan.is_full:
            out.append(
                "components are the full plan: a full plan is a checkpoint under checkpoints/, "
                "never an artifact"
            )
        if tuple(self.physical) != plan.physical:
            out.append(f"physical {list(self.physical)}, expected {list(plan.physical)}")
        if self.iteration < 0 or not self.files:
            out.append(f"iteration {self.iteration}, {len(self.files)} files")
        for name, entry in self.files.items():
            if entry.size < 0 or not entry.digest.well_formed():
                out.append(f"{name}: size {entry.size}, digest {entry.digest.value!r}")
        for name, value in (self.metrics or {}).items():
            if type(value) not in (int, float) or not math.isfinite(value):
                out.append(f"metrics[{name!r}] = {value!r} is not a finite number")
        return out

    def encode(self) -> bytes:
        """Canonical JSON bytes (sorted keys).

        Raises:
            CheckpointError: the record is not a valid artifact manifest, or breaks
                ``specs/artifact.manifest.schema.json`` (a bug in the code that built it);
                nothing is written.
        """
        return _CODEC.encode(self, what=f"the artifact manifest of iteration {self.iteration}")


_CODEC = record_codec(
    ArtifactManifest,
    schema=ARTIFACT_MANIFEST_SCHEMA,
    what="artifact manifest",
    fix=_FIX,
    schema_file=ARTIFACT_MANIFEST_SCHEMA_FILE,
    schema_first=False,
    problems=ArtifactManifest.problems,
)


def decode_artifact_manifest(data: bytes, *, source: str) -> ArtifactManifest:
    """Parse and validate artifact manifest bytes.

    Raises:
        CheckpointCorruptError: not JSON, another schema (a full-checkpoint manifest
            included), malformed fields, values :meth:`ArtifactManifest.problems` refuses, or
            anything ``specs/artifact.manifest.schema.json`` refuses (checked last); the
            message names ``source`` and the problem.
    """
    return _CODEC.decode(data, source=source)


def read_artifact_manifest(store: Store, iteration: int) -> ArtifactManifest:
    """The committed manifest of artifact ``iteration`` in ``store`` (the
    ``checkpoint_artifacts`` root).

    Raises:
        FileNotFoundError: the artifact has no manifest (not committed).
        CheckpointCorruptError: the manifest is malformed or names another iteration.
    """
    return read_unit_manifest(
        store,
        iteration,
        ARTIFACT_MANIFEST_NAME,
        lambda data, source: decode_artifact_manifest(data, source=source),
        what="artifact manifest",
    )
