"""The two records of a multi-role boundary, each through the kernel's one record codec.

``<iter>/<role>/.statecraft-role.json`` (schema ``statecraft.role-commit.v1``,
``specs/roles-role-commit.schema.json``) commits one role unit: the role's name, the
boundary's iteration, the optimizer counter the role committed, and every file of the unit
with its size and digest. Created last in the role's directory by exclusive create.

``<iter>/_SUCCESS`` (schema ``statecraft.roles-success.v1``,
``specs/roles-success.schema.json``) commits the boundary: the roles in order (the first
holds the data cursor and the RNG), each role's committed optimizer counter (``counters``;
absent in a marker written without them, validated by the older rule: every role agrees)
and the loop's ``loop_state`` verbatim. Created last by exclusive create::

    {"schema": "statecraft.roles-success.v1", "iteration": 12,
     "roles": ["policy", "critic"], "counters": {"policy": 8, "critic": 12},
     "loop_state": {"critic_warmup_iterations": 4}, "writer": {"statecraft": "0.1.0"}}
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.kernel.records import record_codec
from statecraft.checkpoint.roles.layout import MARKER_NAME, ROLE_MANIFEST_NAME
from statecraft.checkpoint.roles.loop_state import _problem

__all__ = [
    "MARKER_SCHEMA",
    "ROLE_MANIFEST_SCHEMA",
    "BoundaryMarker",
    "RoleManifest",
    "decode_marker",
    "decode_role_manifest",
]

ROLE_MANIFEST_SCHEMA = "statecraft.role-commit.v1"
MARKER_SCHEMA = "statecraft.roles-success.v1"
_FIX = (
    "statecraft never adopts this boundary; resume=auto passes it over for an older complete "
    "one. Move it aside (or remove it) once you have looked at it"
)


@attrs.frozen
class RoleManifest:
    """The commit record of one role unit (see the module docstring)."""

    schema: str
    iteration: int
    role: str
    optimizer_step: int
    files: dict[str, FileEntry]
    writer: dict[str, str] = attrs.field(factory=dict)

    def problems(self) -> list[str]:
        """What makes this record not a role manifest (empty when it is one)."""
        out: list[str] = []
        if self.iteration < 0 or self.optimizer_step < 0:
            out.append(f"iteration {self.iteration} / optimizer_step {self.optimizer_step}")
        if not self.files:
            out.append("it names no file")
        for name, entry in self.files.items():
            if "/" in name or name in ("", ".", "..", ROLE_MANIFEST_NAME):
                out.append(f"file name {name!r} is not a plain file name of the unit")
            if entry.size < 0 or not entry.digest.well_formed():
                out.append(f"{name}: size {entry.size}, digest {entry.digest.value!r}")
        return out

    def encode(self) -> bytes:
        """Canonical JSON bytes (raises ``CheckpointError`` for a record built wrong)."""
        return _ROLE_CODEC.encode(self, what="a role manifest")


@attrs.frozen
class BoundaryMarker:
    """The ``_SUCCESS`` record of one boundary (see the module docstring).

    Attributes:
        roles: the role names in order; the first holds the data cursor and the RNG.
        counters: role -> the optimizer counter it committed; ``None`` in a marker written
            without them (every role's committed counter must then agree).
        loop_state: the loop's mapping of JSON scalars, verbatim.
    """

    schema: str
    iteration: int
    roles: list[str]
    counters: dict[str, int] | None = None
    loop_state: dict[str, Any] = attrs.field(factory=dict)
    writer: dict[str, str] = attrs.field(factory=dict)

    def problems(self) -> list[str]:
        """What makes this record not a boundary marker (empty when it is one)."""
        out: list[str] = []
        if self.iteration < 0:
            out.append(f"iteration {self.iteration} is negative")
        if len(self.roles) < 2 or len(set(self.roles)) != len(self.roles):
            out.append(f"roles {self.roles} are not two or more distinct names")
        if self.counters is not None:
            if sorted(self.counters) != sorted(self.roles):
                out.append(f"counters name {sorted(self.counters)}, roles are {self.roles}")
            out += [f"counter of {r} is {c}" for r, c in self.counters.items() if c < 0]
        out += [p for k, v in self.loop_state.items() if (p := _problem(k, v)) is not None]
        return out

    def encode(self) -> bytes:
        """Canonical JSON bytes (raises ``CheckpointError`` for a record built wrong)."""
        return _MARKER_CODEC.encode(self, what="a boundary marker")


_ROLE_CODEC = record_codec(
    RoleManifest,
    schema=ROLE_MANIFEST_SCHEMA,
    what="role manifest",
    fix=_FIX,
    schema_file="roles-role-commit.schema.json",
    max_bytes=1 << 20,
    problems=RoleManifest.problems,
)
_MARKER_CODEC = record_codec(
    BoundaryMarker,
    schema=MARKER_SCHEMA,
    what=f"{MARKER_NAME} marker",
    fix=_FIX,
    schema_file="roles-success.schema.json",
    max_bytes=1 << 20,
    problems=BoundaryMarker.problems,
)


def decode_role_manifest(data: bytes, *, source: str) -> RoleManifest:
    """Parse and check role manifest bytes.

    Raises:
        CheckpointCorruptError: naming ``source`` and the problem.
    """
    return _ROLE_CODEC.decode(data, source=source)


def decode_marker(data: bytes, *, source: str) -> BoundaryMarker:
    """Parse and check ``_SUCCESS`` bytes (an unknown schema version is refused).

    Raises:
        CheckpointCorruptError: naming ``source`` and the problem.
    """
    return _MARKER_CODEC.decode(data, source=source)
