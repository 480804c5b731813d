"""The commit record of a direct object-store checkpoint: ``iter_N/.posttrain-manifest.json``
(:class:`DirectManifest`, schema ``statecraft.direct-manifest.v1``, JSON schema
``specs/direct-manifest.schema.json``).

Layout under a direct root (reference: the direct-primary layout)::

    iter_000000100/
      model/  optim/                              # DCP shards + .metadata
      .posttrain/generations/<id>/trainer.pt      # append-only control state (+ data.pt)
      .posttrain-manifest.json                    # this record
    latest_checkpoint.txt

The manifest holds relative paths only (a complete copy of the tree under another prefix
resumes from there): the DCP component directories (DCP's own ``.metadata`` is their
inventory, not duplicated here), the active control generation and the size and digest of each
control file, the logical plan (a same-iteration retry must match it), the writer and the
generation of the object-store lease it was committed under.

Example::

    manifest = DirectManifest.build(100, control_generation=gen, control=records, plan=plan,
                                    writer={"host": "n1"}, lease_generation=lease.generation)
    store.put_if(manifest_path(100), manifest.encode(), if_match=None, if_none_match=True)
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping

import attrs

from statecraft.checkpoint.kernel.layout import MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import FileRecord

__all__ = [
    "CONTROL_DIR",
    "DEFAULT_COMPONENTS",
    "DIRECT_MANIFEST_SCHEMA",
    "DIRECT_MANIFEST_SCHEMA_FILE",
    "DirectManifest",
    "decode_direct_manifest",
    "generation_dir",
    "manifest_path",
    "new_generation_id",
]

DIRECT_MANIFEST_SCHEMA = "statecraft.direct-manifest.v1"
DIRECT_MANIFEST_SCHEMA_FILE = "direct-manifest.schema.json"
#: where control generations live under ``iter_N``
CONTROL_DIR = ".posttrain/generations"
#: the DCP components of a full direct save: logical name -> directory under ``iter_N``
DEFAULT_COMPONENTS: dict[str, str] = {"model": "model", "optim": "optim"}
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_MAX_MANIFEST_BYTES = 16 << 20


def _segment(value: str, what: str) -> str:
    if not isinstance(value, str) or not _SEGMENT_RE.match(value) or len(value) > 128:
        raise ValueError(
            f"{what} {value!r} is not a plain path segment (letters, digits, '.', '_', '-'; "
            "not starting with '.' or '-'; at most 128 characters)"
        )
    return value


def generation_dir(iteration: int, gen_id: str) -> str:
    """``iter_N/.posttrain/generations/<id>``: the directory of one control generation,
    relative to the direct root.

    Raises:
        ValueError: ``gen_id`` is not a plain path segment, or ``iteration`` is out of range.
    """
    return f"{iter_dirname(iteration)}/{CONTROL_DIR}/{_segment(gen_id, 'control generation')}"


def manifest_path(iteration: int) -> str:
    """``iter_N/.posttrain-manifest.json``, relative to the direct root."""
    return f"{iter_dirname(iteration)}/{MANIFEST_NAME}"


def new_generation_id(clock: Callable[[], float] = time.time) -> str:
    """A fresh control generation id that sorts by creation time:
    ``g<unix milliseconds, 13 digits>-<8 random hex>``."""
    return f"g{int(clock() * 1000):013d}-{uuid.uuid4().hex[:8]}"


@attrs.frozen
class DirectManifest:
    """The commit record of one direct checkpoint (see the module doc).

    Attributes:
        iteration: the optimizer step ``N`` of ``iter_N``.
        format: always ``"dcp"``.
        components: DCP component -> its directory under ``iter_N`` (``{"model": "model",
            "optim": "optim"}``).
        control_generation: the active generation id under ``iter_N/.posttrain/generations``.
        control: control file name (``trainer.pt``, ``data.pt``) -> size and digest.
        plan: the logical component plan (``("model", "optimizer", "training_state")``).
        writer: who committed it (informational strings).
        lease_generation: the object-store lease generation it was committed under.
        files: every DCP file under ``iter_N`` (``model/__0_0.distcp``, ``model/.metadata``,
            every rank's) -> size and digest, gathered from every rank (empty: not recorded).
        layout: DCP component -> a digest of its state's keys, shapes and dtypes (a
            same-iteration retry from another model is plan drift; empty: not recorded).
    """

    schema: str
    iteration: int
    format: str
    components: dict[str, str]
    control_generation: str
    control: dict[str, FileEntry]
    plan: tuple[str, ...]
    writer: dict[str, str]
    lease_generation: int
    files: dict[str, FileEntry] = attrs.field(factory=dict)
    layout: dict[str, str] = attrs.field(factory=dict)

    @classmethod
    def build(
        cls,
        iteration: int,
        *,
        control_generation: str,
        control: Mapping[str, FileRecord | FileEntry],
        plan: tuple[str, ...],
        writer: Mapping[str, str],
        lease_generation: int,
        components: Mapping[str, str] | None = None,
        files: Mapping[str, FileRecord | FileEntry] | None = None,
        layout: Mapping[str, str] | None = None,
    ) -> DirectManifest:
        """A manifest from what a save wrote. ``control`` maps each control file's name
        (under the generation directory) to its :class:`FileRecord` or entry.

        Raises:
            ValueError: a name or id is not a plain path segment.
        """
        entries = {
            _segment(name, "control file"): (
                FileEntry(rec.size, rec.digest) if isinstance(rec, FileRecord) else rec
            )
            for name, rec in control.items()
        }
        comps = dict(DEFAULT_COMPONENTS if components is None else components)
        for name, directory in comps.items():
            _segment(directory, f"component {name!r} directory")
        return cls(
            schema=DIRECT_MANIFEST_SCHEMA,
            iteration=iteration,
            format="dcp",
            components=comps,
            control_generation=_segment(control_generation, "control generation"),
            control=entries,
            plan=tuple(plan),
            writer=dict(writer),
            lease_generation=lease_generation,
            files={
                path: FileEntry(rec.size, rec.digest) if isinstance(rec, FileRecord) else rec
                for path, rec in sorted((files or {}).items())
            },
            layout=dict(layout or {}),
        )

    @property
    def iter_dir(self) -> str:
        return iter_dirname(self.iteration)

    @property
    def generation_path(self) -> str:
        """The active control generation's directory, relative to the root."""
        return generation_dir(self.iteration, self.control_generation)

    def component_path(self, component: str) -> str:
        """``iter_N/<dir>`` of a DCP component, relative to the root.

        Raises:
            KeyError: the manifest names no such component.
        """
        return f"{self.iter_dir}/{self.components[component]}"

    def control_path(self, name: str) -> str:
        """``iter_N/.posttrain/generations/<id>/<name>``, relative to the root.

        Raises:
            KeyError: the manifest names no such control file.
        """
        if name not in self.control:
            raise KeyError(name)
        return f"{self.generation_path}/{name}"

    def same_commit(self, other: DirectManifest) -> list[str]:
        """What differs between two manifests of one iteration, ignoring who wrote them
        (``writer``, ``lease_generation``) and which control generation is active: the
        plan a same-iteration retry must match. Empty when it matches."""
        out = []
        for field in ("iteration", "format", "components", "plan"):
            mine, theirs = getattr(self, field), getattr(other, field)
            if mine != theirs:
                out.append(f"{field}: committed {theirs!r}, now {mine!r}")
        if sorted(self.control) != sorted(other.control):
            out.append(
                f"control files: committed {sorted(other.control)}, now {sorted(self.control)}"
            )
        if self.layout and other.layout and self.layout != other.layout:
            out.append(f"state layout: committed {other.layout}, now {self.layout}")
        return out

    def encode(self) -> bytes:
        """Canonical JSON bytes (sorted keys), checked against the JSON schema.

        Raises:
            CheckpointError: the record breaks ``specs/direct-manifest.schema.json`` (a bug in
                the code that built it); nothing is written.
        """
        return _CODEC.encode(self, what=f"the direct manifest of iteration {self.iteration}")


_CODEC = record_codec(
    DirectManifest,
    schema=DIRECT_MANIFEST_SCHEMA,
    fix=(
        "The iteration is not a committed direct checkpoint: resume from another iteration "
        "(or move this iter_* prefix aside)"
    ),
    schema_file=DIRECT_MANIFEST_SCHEMA_FILE,
    max_bytes=_MAX_MANIFEST_BYTES,
    not_json="is not JSON",
    wrong_schema="is not a {expected} record (schema {found!r})",
)


def decode_direct_manifest(
    data: bytes, *, source: str, iteration: int | None = None
) -> DirectManifest:
    """Parse and validate the bytes of a direct manifest (``source`` names it in messages).

    Args:
        iteration: when given, the manifest must be of this iteration (it lies in ``iter_N``).

    Raises:
        CheckpointCorruptError: too large, not JSON, another schema, anything
            ``specs/direct-manifest.schema.json`` refuses (unknown, missing or mistyped
            fields, a path that is not relative, a malformed digest), or another iteration;
            the message names ``source`` and the fix.
    """
    manifest = _CODEC.decode(data, source=source)
    if iteration is not None and manifest.iteration != iteration:
        raise CheckpointCorruptError(
            source,
            f"names iteration {manifest.iteration} but lies in {iter_dirname(iteration)}",
            _CODEC.fix,
        )
    return manifest
