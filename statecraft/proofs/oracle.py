"""The independent oracle the guarantee checks judge with.

It reads raw simulated-disk bytes, parses the manifest JSON itself, hashes every file itself
and loads payloads itself (``torch.load(weights_only=True)`` of the raw bytes), instead of
calling the production verification it is meant to judge. A :class:`DiskView` is a frozen
picture of the checkpoints root (files and top-level names, empty directories included),
taken by the scenario at the moment a transaction or a resume started.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import torch
import xxhash

from statecraft.engine.crash import IoRecord
from statecraft.proofs.scenario import GuaranteeViolation
from statecraft.storage.sim import SimWorld

__all__ = [
    "CHECKPOINTS_ROOT",
    "MANIFEST",
    "POINTER",
    "DiskView",
    "committed_files",
    "deep_equal",
    "digest_of",
    "iteration_name",
    "load_payload",
    "recorded_digest",
    "touched_paths",
]

CHECKPOINTS_ROOT = "/out/proj/group/name/20260101000000/checkpoints"
MANIFEST = ".posttrain-manifest.json"
POINTER = "latest_checkpoint.txt"
_ITER = re.compile(r"^iter_(\d{9})$")
_FULL_COMPONENTS = ["model", "optimizer", "training_state"]
_SCALARS = (int, float, str, bool, type(None))
_LOADS: dict[str, tuple[bool, Any]] = {}  # sha256 -> (loaded, payload or error)


def recorded_digest(entry: dict[str, Any]) -> tuple[str, str]:
    """``(algorithm, hex value)`` a manifest entry records: v2 ``digest`` or v1 ``sha256``."""
    if "digest" in entry:
        return str(entry["digest"]["algorithm"]), str(entry["digest"]["value"])
    return "sha256", str(entry["sha256"])


def digest_of(data: bytes, algorithm: str) -> str:
    """``data`` hashed here with ``algorithm`` (independently of ``statecraft.storage``)."""
    if algorithm == "xxh3_128":
        return xxhash.xxh3_128_hexdigest(data)
    return hashlib.new(algorithm, data).hexdigest()


def iteration_name(iteration: int) -> str:
    return f"iter_{iteration:09d}"


def json_or_none(data: bytes | None) -> Any:
    """The JSON document in ``data``; ``None`` when it is absent or not JSON (a torn or
    missing record, which the caller judges)."""
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def load_payload(data: bytes) -> tuple[bool, Any]:
    """``(True, payload)`` when ``data`` loads with ``weights_only=True``, else ``(False,
    error)``. Memoized by digest: the same bytes are judged thousands of times."""
    key = hashlib.sha256(data).hexdigest()
    if key not in _LOADS:
        try:
            _LOADS[key] = (True, torch.load(io.BytesIO(data), weights_only=True))
        except Exception as exc:  # any failure to load safely means "not loadable"
            _LOADS[key] = (False, f"{type(exc).__name__}: {str(exc)[:120]}")
    return _LOADS[key]


@attrs.frozen
class DiskView:
    """The checkpoints root as a process would read it at one moment.

    Attributes:
        files: relative path -> bytes, every file under the root.
        names: the root's entries (so an empty ``iter_*`` directory is seen too).
    """

    files: dict[str, bytes]
    names: tuple[str, ...]
    _problems: dict[tuple[int, tuple[str, ...]], str | None] = attrs.field(
        factory=dict, eq=False, repr=False
    )

    @classmethod
    def of(cls, world: SimWorld) -> DiskView:
        fs = world.fs
        names = tuple(fs.listdir(CHECKPOINTS_ROOT)) if fs.stat(CHECKPOINTS_ROOT) else ()
        return cls(fs.tree(CHECKPOINTS_ROOT), names)

    def iterations(self) -> list[int]:
        """Iterations with an ``iter_*`` entry in the root, oldest first."""
        found = (m for m in (_ITER.match(n) for n in self.names) if m)
        return sorted(int(m.group(1)) for m in found)

    def problem(self, iteration: int, files: Sequence[str]) -> str | None:
        """Why ``iteration`` is not a complete, intact, loadable checkpoint with exactly the
        plan ``files`` (None if it is)."""
        key = (iteration, tuple(sorted(files)))
        if key not in self._problems:
            self._problems[key] = self._problem(iteration, key[1])
        return self._problems[key]

    def _problem(self, iteration: int, files: tuple[str, ...]) -> str | None:
        name = iteration_name(iteration)
        raw = self.files.get(f"{name}/{MANIFEST}")
        if raw is None:
            return f"{name} has no manifest"
        try:
            manifest = json.loads(raw)
            recorded = manifest["files"]
            if manifest["iteration"] != iteration or manifest["components"] != _FULL_COMPONENTS:
                found = f"{manifest['iteration']} / {manifest['components']}"
                return f"{name} manifest names iteration / components {found}"
            entries = {f: (int(e["size"]), recorded_digest(e)) for f, e in recorded.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return f"{name} manifest unreadable: {exc!r}"
        if sorted(entries) != sorted(files):
            return f"{name} manifest records {sorted(entries)}, not the full plan {sorted(files)}"
        for file_name, (size, digest) in sorted(entries.items()):
            data = self.files.get(f"{name}/{file_name}")
            if data is None:
                return f"{name}/{file_name} is missing"
            if len(data) != size or digest_of(data, digest[0]) != digest[1]:
                return f"{name}/{file_name} does not match its manifest ({len(data)} bytes)"
            loaded, payload = load_payload(data)
            if not loaded:
                return f"{name}/{file_name} does not load with weights_only=True ({payload})"
        trainer = load_payload(self.files[f"{name}/trainer.pt"])[1]
        if not isinstance(trainer, dict) or trainer.get("optimizer_step") != iteration:
            return f"{name}/trainer.pt does not record optimizer_step {iteration}"
        return None

    def verified(self, files: Sequence[str]) -> list[int]:
        return [i for i in self.iterations() if self.problem(i, files) is None]

    def pointer_raw(self) -> bytes | None:
        return self.files.get(POINTER)

    def pointer(self) -> int | None:
        """The iteration ``latest_checkpoint.txt`` names (None if absent).

        Raises:
            GuaranteeViolation: it exists but does not hold an iteration name.
        """
        raw = self.pointer_raw()
        if raw is None:
            return None
        match = _ITER.match(raw.decode(errors="replace").strip())
        if match is None:
            raise GuaranteeViolation(f"{POINTER} holds {raw[:40]!r}, not an iteration name")
        return int(match.group(1))

    def pointer_or_none(self) -> int | None:
        """Like :meth:`pointer`, but garbage reads as None (for a damaged starting tree)."""
        try:
            return self.pointer()
        except GuaranteeViolation:
            return None

    def payload(self, iteration: int, file_name: str) -> Any:
        """The loaded payload of one file of ``iteration`` (it must load)."""
        loaded, payload = load_payload(self.files[f"{iteration_name(iteration)}/{file_name}"])
        if not loaded:
            raise GuaranteeViolation(f"{iteration_name(iteration)}/{file_name}: {payload}")
        return payload


def committed_files(view: DiskView) -> set[str]:
    """Absolute paths of every committed file (each file a parseable manifest records, the
    manifest itself, and the iteration directory) in ``view``."""
    out: set[str] = set()
    for iteration in view.iterations():
        name = iteration_name(iteration)
        raw = view.files.get(f"{name}/{MANIFEST}")
        try:
            recorded = list(json.loads(raw)["files"]) if raw is not None else None
        except (ValueError, KeyError, TypeError):
            recorded = None
        if recorded is None:
            continue
        base = f"{CHECKPOINTS_ROOT}/{name}"
        out |= {base, f"{base}/{MANIFEST}", *(f"{base}/{f}" for f in recorded)}
    return out


def touched_paths(record: IoRecord) -> tuple[str, ...]:
    """The names an I/O operation creates, replaces or removes (both sides of a rename)."""
    if record.op in ("rename", "link"):
        src, _, dst = record.target.partition(" -> ")
        return (src, dst) if record.op == "rename" else (dst,)
    if record.op in ("open_write", "unlink", "mkdir", "rmdir"):
        return (record.target,)
    return ()


def deep_equal(a: Any, b: Any) -> bool:
    """Structural equality of loaded state (tensors by value and dtype; lists == tuples)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(torch.equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return False
        if all(type(x) in _SCALARS for x in a) and all(type(y) in _SCALARS for y in b):
            return [(type(x), x) for x in a] == [(type(y), y) for y in b]  # RNG key vectors
        return all(deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two loaded states differ first (None when :func:`deep_equal`)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path or 'root'}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        for k in a:
            found = first_difference(a[k], b[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        if deep_equal(a, b):
            return None
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if deep_equal(a, b) else f"{path or 'root'}: {_short(a)} vs {_short(b)}"


def _short(value: Any) -> str:
    text = repr(value.tolist() if isinstance(value, torch.Tensor) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def ops_on(records: Iterable[IoRecord], names: set[str]) -> list[IoRecord]:
    """The operations in ``records`` that create, replace or remove one of ``names``."""
    return [r for r in records if any(p in names for p in touched_paths(r))]
