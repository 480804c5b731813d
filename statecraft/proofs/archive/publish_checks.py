"""Guarantee checks of ``specs/publish.toml``, judged from raw bytes.

The checks parse the receipt, the declaration and the manifests as JSON themselves and hash
every object themselves (``hashlib.sha256``), instead of calling the production decoding they
judge; the bucket is read through the :class:`~statecraft.storage.objects.SimBucket` fields
(``objects``: bytes, ``sha256``: the stored metadata).
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable
from typing import Any

from statecraft.engine.crash import IoRecord
from statecraft.proofs.archive.publish_scenarios import PublishRecovery, remote_prefix
from statecraft.proofs.artifacts.oracle import ARTIFACT_MANIFEST, ARTIFACTS_ROOT, tree_of
from statecraft.proofs.oracle import iteration_name, json_or_none, touched_paths
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.storage.sim import SimWorld

__all__ = [
    "declaration_never_replaced",
    "local_artifact_untouched",
    "receipt_only_after_verified_archive",
    "remote_manifest_implies_verified_payloads",
    "retry_finishes_or_refuses",
]

_DECLARATION = ".posttrain-archive.json"
_RECEIPT = ".uploaded"
_BUCKET_WRITES = ("put", "delete")


def _iteration(ctx: CheckContext) -> int:
    return int(ctx.scenario.target)


def _remote(world: SimWorld, iteration: int, name: str) -> bytes | None:
    found = world.bucket.objects.get(f"{remote_prefix(iteration)}/{name}")
    return None if found is None else found[0]


def _inventory(document: Any) -> dict[str, tuple[int, str]] | None:
    """``path -> (size, sha256)`` of a declaration or receipt document (``None``: malformed)."""
    if not isinstance(document, dict) or not isinstance(document.get("files"), list):
        return None
    out: dict[str, tuple[int, str]] = {}
    for entry in document["files"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            return None
        out[entry["path"]] = (entry["size"], entry["sha256"])
    return out


def _declared(world: SimWorld, iteration: int) -> dict[str, tuple[int, str]] | None:
    document = json_or_none(_remote(world, iteration, _DECLARATION))
    if (
        not isinstance(document, dict)
        or document.get("schema") != "statecraft.archive-declaration.v1"
    ):
        return None
    if document.get("iteration") != iteration:
        return None
    return _inventory(document)


def _local_inventory(files: dict[str, bytes], iteration: int) -> dict[str, tuple[int, str]]:
    """What the local artifact's inventory is (every file of iter_N but receipts and
    temporaries), from ``checkpoint_artifacts/`` as ``tree_of`` gives it."""
    base = iteration_name(iteration) + "/"
    return {
        path[len(base) :]: (len(data), hashlib.sha256(data).hexdigest())
        for path, data in files.items()
        if path.startswith(base) and not _is_receipt(path)
    }


def _is_receipt(path: str) -> bool:
    name = posixpath.basename(path)
    return name == _RECEIPT or name.startswith((".uploaded.tmp", "..uploaded.tmp-"))


def _live(world: SimWorld, iteration: int, declared: dict[str, tuple[int, str]]) -> list[str]:
    """Declared files not live remotely with their size, bytes' sha256 and stored sha256."""
    problems = []
    for path, (size, sha) in sorted(declared.items()):
        key = f"{remote_prefix(iteration)}/{path}"
        found = world.bucket.objects.get(key)
        if found is None:
            problems.append(f"{path} missing")
            continue
        data = found[0]
        stored = world.bucket.sha256.get(key, "")
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha or stored != sha:
            problems.append(f"{path}: {len(data)} bytes, stored sha256 {stored[:12]!r}")
    return problems


def _bucket_writes(log: Iterable[IoRecord]) -> list[IoRecord]:
    return [r for r in log if r.op in _BUCKET_WRITES]


def _describe(records: Iterable[IoRecord]) -> str:
    return "; ".join(f"#{r.index} {r.op} {r.target}" for r in records)


def receipt_only_after_verified_archive(ctx: CheckContext) -> None:
    """PUB-MARKER-VERIFIED: a receipt implies a complete, verified, committed archive."""
    iteration = _iteration(ctx)
    path = f"{iteration_name(iteration)}/{_RECEIPT}"
    data = tree_of(ctx.world, ARTIFACTS_ROOT).get(path)
    if data is None:
        return
    ctx.exercised()
    receipt = json_or_none(data)
    inventory = _inventory(receipt)
    if (
        inventory is None
        or receipt.get("kind") != "artifact"
        or receipt.get("iteration") != iteration
        or receipt.get("destination", {}).get("prefix") != remote_prefix(iteration)
    ):
        raise GuaranteeViolation(f"{path} is not a kind-artifact receipt of this archive: {data!r}")
    declared = _declared(ctx.world, iteration)
    if declared is None:
        raise GuaranteeViolation(f"{path} exists but the remote declaration is absent or invalid")
    if inventory != declared:
        raise GuaranteeViolation(f"{path} lists {inventory}, the declaration {declared}")
    problems = _live(ctx.world, iteration, declared)
    if problems:
        raise GuaranteeViolation(f"{path} exists but the archive is not verified: {problems}")
    if _remote(ctx.world, iteration, ARTIFACT_MANIFEST) is None:
        raise GuaranteeViolation(f"{path} exists but the remote artifact manifest is not committed")


def remote_manifest_implies_verified_payloads(ctx: CheckContext) -> None:
    """PUB-MANIFEST-LAST: a remote artifact manifest implies every declared payload verified."""
    iteration = _iteration(ctx)
    if _remote(ctx.world, iteration, ARTIFACT_MANIFEST) is None:
        return
    ctx.exercised()
    declared = _declared(ctx.world, iteration)
    if declared is None or ARTIFACT_MANIFEST not in declared:
        raise GuaranteeViolation("the remote artifact manifest exists without a valid declaration")
    problems = _live(ctx.world, iteration, declared)
    if problems:
        raise GuaranteeViolation(
            f"the remote artifact manifest is committed but the archive is not: {problems}"
        )


def declaration_never_replaced(ctx: CheckContext) -> None:
    """PUB-DECLARATION-IMMUTABLE: an existing declaration keeps its bytes; a different (or
    malformed) one makes the publish write nothing to the bucket and fail."""
    iteration = _iteration(ctx)
    if ctx.phase == "crashed":
        found = _remote(ctx.before, iteration, _DECLARATION)
        local = _local_inventory(tree_of(ctx.before, ARTIFACTS_ROOT), iteration)
        logs = [("the crashed run", ctx.io_log, ctx.scenario.last_run)]
    else:
        recovery: PublishRecovery = ctx.recovery
        found = recovery.declaration
        local = _local_inventory(recovery.local, iteration)
        logs = [("the retry", recovery.retry_io, recovery.retry)]
    if found is None:
        return
    ctx.exercised()
    now = _remote(ctx.world, iteration, _DECLARATION)
    if now != found:
        raise GuaranteeViolation(
            f"the remote declaration changed ({ctx.phase}): {found[:60]!r} -> {(now or b'')[:60]!r}"
        )
    declared = _inventory(json_or_none(found))
    if declared == local or not local:
        if ctx.phase == "recovered" and not ctx.recovery.retry.failed:
            receipt = json_or_none(
                tree_of(ctx.world, ARTIFACTS_ROOT).get(f"{iteration_name(iteration)}/{_RECEIPT}")
            )
            if _inventory(receipt) != declared:
                raise GuaranteeViolation(
                    "the completed retry's receipt is not the declared inventory"
                )
        return
    expected = "ArchiveMismatchError" if declared is not None else "CheckpointCorruptError"
    for who, log, result in logs:
        writes = _bucket_writes(log)
        if writes:
            raise GuaranteeViolation(
                f"{who} wrote to the bucket although another inventory is declared: "
                f"{_describe(writes)}"
            )
        if result is not None and (not result.failed or type(result.error).__name__ != expected):
            raise GuaranteeViolation(
                f"{who} ended {result.final_state} ({type(result.error).__name__}) although "
                f"another inventory is declared; expected {expected}"
            )


def local_artifact_untouched(ctx: CheckContext) -> None:
    """PUB-LOCAL-UNTOUCHED: the only local names a publish changes are its receipt's."""
    if ctx.phase == "crashed":
        start, log = tree_of(ctx.before, ARTIFACTS_ROOT), ctx.io_log
    else:
        start, log = ctx.recovery.local, ctx.recovery.retry_io
    ctx.exercised()
    receipt = f"{ARTIFACTS_ROOT}/{iteration_name(_iteration(ctx))}/"
    stray = [
        r
        for r in log
        if any(not (p.startswith(receipt) and _is_receipt(p)) for p in touched_paths(r))
    ]
    if stray:
        raise GuaranteeViolation(f"the publish changed local names: {_describe(stray)}")
    now = tree_of(ctx.world, ARTIFACTS_ROOT)
    keep = {p: d for p, d in start.items() if not _is_receipt(p)}
    after = {p: d for p, d in now.items() if not _is_receipt(p)}
    if keep != after:
        changed = sorted(set(keep) ^ set(after) | {p for p in keep if after.get(p) != keep[p]})
        raise GuaranteeViolation(f"local files changed under the publish: {changed}")


def retry_finishes_or_refuses(ctx: CheckContext) -> None:
    """PUB-RETRY-FINISHES: the retry publishes, or refuses with the error its state calls for."""
    recovery: PublishRecovery = ctx.recovery
    iteration = _iteration(ctx)
    ctx.exercised()
    local = _local_inventory(recovery.local, iteration)
    declared = _inventory(json_or_none(recovery.declaration))
    result = recovery.retry
    if ARTIFACT_MANIFEST not in local:
        expected: str | None = "ArchiveError"
    elif recovery.declaration is not None and declared is None:
        expected = "CheckpointCorruptError"
    elif declared is not None and declared != local:
        expected = "ArchiveMismatchError"
    else:
        expected = None
    if expected is not None:
        if not result.failed or type(result.error).__name__ != expected:
            raise GuaranteeViolation(
                f"the retry ended {result.final_state} ({result.error!r}); expected {expected}"
            )
        return
    if result.failed or result.final_state != "published":
        raise GuaranteeViolation(f"the retry ended {result.final_state}: {result.error!r}")
    receipt = _inventory(
        json_or_none(
            tree_of(ctx.world, ARTIFACTS_ROOT).get(f"{iteration_name(iteration)}/{_RECEIPT}")
        )
    )
    if receipt != local:
        raise GuaranteeViolation(f"the retry's receipt lists {receipt}, the local artifact {local}")
    if _remote(ctx.world, iteration, ARTIFACT_MANIFEST) != recovery.local.get(
        f"{iteration_name(iteration)}/{ARTIFACT_MANIFEST}"
    ):
        raise GuaranteeViolation("the remote artifact manifest is not the local one's bytes")
    problems = _live(ctx.world, iteration, local)
    if problems:
        raise GuaranteeViolation(f"the retry published an unverified archive: {problems}")
