"""The checks named by ``specs/incremental_gc.toml``. They judge the simulated disk (raw
bytes; manifests parsed here, component files loaded here with ``weights_only``) and
raise :class:`~statecraft.proofs.GuaranteeViolation` with what they found; each calls
``ctx.exercised()`` only when it asserted something in the state it was given."""

from __future__ import annotations

import io
import json
from typing import Any

import torch
import xxhash

from statecraft.proofs.incremental.scenarios import IncrementalScenario
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, MANIFEST
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "committed_iterations_hold_what_was_saved",
    "no_committed_iteration_misses_a_blob",
    "shared_blob_survives_pruning",
]

_REF = "__statecraft_blob__"


def _files(ctx: CheckContext) -> dict[str, bytes]:
    """Every file under the checkpoints root, relative path -> bytes."""

    def compute() -> dict[str, bytes]:
        return ctx.world.fs.tree(CHECKPOINTS_ROOT)

    return ctx.memo("incremental-files", compute)


def _committed(files: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    """iter dir -> its manifest (parsed), for every dir holding one."""
    out = {}
    for path, data in files.items():
        directory, _, name = path.partition("/")
        if name == MANIFEST:
            try:
                out[directory] = json.loads(data)
            except ValueError as exc:
                raise GuaranteeViolation(f"{path} does not parse: {exc}") from None
    return out


def _listed(manifest: dict[str, Any], files: dict[str, bytes], directory: str) -> dict[str, int]:
    """The blobs the manifest lists for each entry still on disk."""
    blobs: dict[str, int] = {}
    for key, value in manifest.get("writer", {}).items():
        if key.startswith("blobs:") and f"{directory}/{key[6:]}" in files:
            for item in value.split():
                digest, _, size = item.partition(":")
                blobs[digest] = int(size)
    return blobs


def _refs(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        if value.get(_REF):
            return [value]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list | tuple):
        return [r for v in value for r in _refs(v)]
    return []


def _load(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def _blob_problem(files: dict[str, bytes], digest: str, size: int) -> str | None:
    data = files.get(f"blobs/{digest}")
    if data is None:
        return "missing"
    if len(data) != size:
        return f"{len(data)} bytes, expected {size}"
    if xxhash.xxh3_128_hexdigest(data) != digest:
        return "torn (its bytes do not hash to its name)"
    return None


def no_committed_iteration_misses_a_blob(ctx: CheckContext) -> None:
    """INC-NO-MISSING-BLOB: every blob a committed iteration references (its manifest's blob
    lists and the references in its component files) is under ``blobs/``, whole."""
    files = _files(ctx)
    for directory, manifest in sorted(_committed(files).items()):
        if manifest.get("format") != "incremental":
            continue
        ctx.exercised()
        needed = _listed(manifest, files, directory)
        for entry in ("model.pt", "optim.pt"):
            data = files.get(f"{directory}/{entry}")
            if data is None:
                continue
            for ref in _refs(_load(data)):
                for digest, size in ref["chunks"]:
                    if needed.get(digest) != size:
                        raise GuaranteeViolation(
                            f"{directory}/{entry} references blob {digest} its manifest does "
                            "not list: the manifest does not describe the iteration"
                        )
        for digest, size in sorted(needed.items()):
            problem = _blob_problem(files, digest, size)
            if problem is not None:
                raise GuaranteeViolation(
                    f"committed {directory} references blobs/{digest}, which is {problem}"
                )


def shared_blob_survives_pruning(ctx: CheckContext) -> None:
    """INC-SHARED-SURVIVES: the blob of the frozen tensor the setup's iterations share is
    whole after any crash and after recovery, whichever iteration was pruned."""
    scenario: IncrementalScenario = ctx.scenario
    frozen = scenario.expected_frozen(min(scenario.saved)).numpy().tobytes()
    digest = xxhash.xxh3_128_hexdigest(frozen)
    files = _files(ctx)
    users = [
        d
        for d, m in _committed(files).items()
        if digest in _listed(m, files, d) and f"{d}/model.pt" in files
    ]
    if not users:
        return
    ctx.exercised()
    problem = _blob_problem(files, digest, len(frozen))
    if problem is not None:
        raise GuaranteeViolation(
            f"blobs/{digest}, shared by {sorted(users)}, is {problem} after the pruning"
        )


def committed_iterations_hold_what_was_saved(ctx: CheckContext) -> None:
    """INC-EXACT: every committed iteration's ``model.pt``, read through its blobs, holds the
    tensors its save was given (an in-place update of a shared tensor included)."""
    scenario: IncrementalScenario = ctx.scenario
    files = _files(ctx)
    for directory, manifest in sorted(_committed(files).items()):
        data = files.get(f"{directory}/model.pt")
        if manifest.get("format") != "incremental" or data is None:
            continue
        iteration = int(directory.removeprefix("iter_"))
        loaded = _load(data)
        for key, expected in scenario.expected_model(iteration).items():
            value = loaded.get(key)
            if isinstance(value, dict) and value.get(_REF):
                paths = [f"blobs/{d}" for d, _ in value["chunks"]]
                if any(p not in files for p in paths):
                    continue  # a missing blob is INC-NO-MISSING-BLOB's finding
                got = b"".join(files[p] for p in paths)
            elif isinstance(value, torch.Tensor):
                got = value.numpy().tobytes()
            else:
                raise GuaranteeViolation(f"{directory}/model.pt holds no {key}")
            ctx.exercised()
            if got != expected.numpy().tobytes():
                raise GuaranteeViolation(
                    f"committed {directory}/model.pt holds other bytes for {key} than its "
                    "save was given (an update the unchanged-check missed)"
                )
