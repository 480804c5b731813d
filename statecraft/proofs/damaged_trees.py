"""Damage a scenario applies to the disk after its previous checkpoints are committed (the
``setup_extra`` of :class:`~statecraft.proofs.save.scenarios.SaveScenario`), so resume's
fallback rules are proven by the crash explorer, not only by unit tests.

Every damage acts on raw simulated-disk bytes (no production code), and the explorer then
makes it durable. The hostile pickle is a ``torch.save`` file whose unpickling would call
:func:`payload_ran` (a ``__reduce__`` payload); :data:`PAYLOAD_RAN` records every call, so a
check can prove resume never executed it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import torch

from statecraft.proofs.oracle import (
    CHECKPOINTS_ROOT,
    MANIFEST,
    POINTER,
    digest_of,
    iteration_name,
    recorded_digest,
)
from statecraft.storage.sim import SimWorld

__all__ = [
    "HOSTILE_MARKER",
    "PAYLOAD_RAN",
    "bit_flip",
    "dangling_latest",
    "garbage_latest",
    "grown_file",
    "hostile_pickle",
    "leftovers_of",
    "manifest_omits",
    "newer_partial",
    "payload_ran",
    "stale_latest",
]

Damage = Callable[[SimWorld], None]

PAYLOAD_RAN: list[str] = []  # tags of hostile payloads that executed in this process
HOSTILE_MARKER = b"payload_ran"  # the global a hostile pickle names (found in its bytes)


def payload_ran(tag: str) -> dict[str, str]:
    """What a hostile pickle calls when it is unpickled without ``weights_only``."""
    PAYLOAD_RAN.append(tag)
    return {"hostile": tag}


class _Hostile:
    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __reduce__(self) -> tuple[Callable[[str], dict[str, str]], tuple[str]]:
        return (payload_ran, (self.tag,))


def _put(world: SimWorld, rel: str, data: bytes) -> None:
    """Replace ``rel`` under the checkpoints root with ``data`` (durable after setup)."""
    handle = world.fs.open_write(f"{CHECKPOINTS_ROOT}/{rel}", exclusive=False)
    world.fs.write(handle, data)
    world.fs.close(handle)


def _rel(iteration: int, file_name: str) -> str:
    return f"{iteration_name(iteration)}/{file_name}"


def leftovers_of(iteration: int) -> Damage:
    """A killed save's leftovers: ``iter_<n>`` with a half model and a writer temporary."""

    def damage(world: SimWorld) -> None:
        world.fs.makedirs(f"{CHECKPOINTS_ROOT}/{iteration_name(iteration)}")
        _put(world, _rel(iteration, "model.pt"), b"half a model from a killed save")
        _put(world, _rel(iteration, ".optim.pt.tmp-1-1"), b"torn")

    return damage


def bit_flip(iteration: int, file_name: str) -> Damage:
    """Bit rot: one bit of a committed file flips (same size, another digest)."""

    def damage(world: SimWorld) -> None:
        data = bytearray(world.fs.read(f"{CHECKPOINTS_ROOT}/{_rel(iteration, file_name)}"))
        data[len(data) // 2] ^= 0x01
        _put(world, _rel(iteration, file_name), bytes(data))

    return damage


def grown_file(iteration: int, file_name: str) -> Damage:
    """A committed file whose size disagrees with its manifest (bytes appended)."""

    def damage(world: SimWorld) -> None:
        data = world.fs.read(f"{CHECKPOINTS_ROOT}/{_rel(iteration, file_name)}")
        _put(world, _rel(iteration, file_name), data + b"appended by someone")

    return damage


def dangling_latest(iteration: int) -> Damage:
    """``latest_checkpoint.txt`` names an iteration that does not exist."""
    return lambda world: _put(world, POINTER, f"{iteration_name(iteration)}\n".encode())


def stale_latest(iteration: int) -> Damage:
    """``latest_checkpoint.txt`` names an older committed iteration than the newest."""
    return dangling_latest(iteration)


def garbage_latest() -> Damage:
    """``latest_checkpoint.txt`` holds bytes that are not an iteration name."""
    return lambda world: _put(world, POINTER, b"\x00\x17 not a pointer \xff")


def newer_partial(iteration: int) -> Damage:
    """A newer iteration directory without a manifest (a save that never committed)."""

    def damage(world: SimWorld) -> None:
        world.fs.makedirs(f"{CHECKPOINTS_ROOT}/{iteration_name(iteration)}")
        _put(world, _rel(iteration, "model.pt"), b"a model whose save never committed")

    return damage


def hostile_pickle(iteration: int, file_name: str) -> Damage:
    """Replace a committed file with a pickle that would run code when loaded, and re-record
    its size and digest in the manifest, so only loading it safely can tell."""

    def damage(world: SimWorld) -> None:
        buffer = io.BytesIO()
        torch.save(_Hostile(_rel(iteration, file_name)), buffer)
        data = buffer.getvalue()
        _put(world, _rel(iteration, file_name), data)
        path = f"{CHECKPOINTS_ROOT}/{_rel(iteration, MANIFEST)}"
        manifest = json.loads(world.fs.read(path))
        entry = manifest["files"][file_name]
        algorithm, _ = recorded_digest(entry)
        if "digest" in entry:
            entry["digest"]["value"] = digest_of(data, algorithm)
        else:
            entry["sha256"] = digest_of(data, algorithm)
        entry["size"] = len(data)
        _put(world, _rel(iteration, MANIFEST), json.dumps(manifest, sort_keys=True).encode())

    return damage


def manifest_omits(iteration: int, file_name: str) -> Damage:
    """Delete ``file_name``'s entry from a committed manifest and leave the file on disk: the
    manifest no longer lists every file its plan requires (a hand-edited or truncated one)."""

    def damage(world: SimWorld) -> None:
        path = f"{CHECKPOINTS_ROOT}/{_rel(iteration, MANIFEST)}"
        manifest = json.loads(world.fs.read(path))
        del manifest["files"][file_name]
        _put(world, _rel(iteration, MANIFEST), json.dumps(manifest, sort_keys=True).encode())

    return damage
