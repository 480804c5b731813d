"""The checks named by ``specs/upload.toml``.

They judge with raw simulated-disk bytes, the simulated bucket's objects (their bytes and the
sha256 metadata the bucket stored), JSON parsed here, and the operations the runs performed
(the gate's log). Each raises :class:`~statecraft.proofs.GuaranteeViolation` with what it
found and calls ``ctx.exercised()`` only when it asserted something in the state it was given.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Iterable
from typing import Any

from statecraft.engine.crash import IoRecord
from statecraft.proofs.archive.upload_scenarios import (
    REMOTE_PREFIX,
    RemoteObjectSeen,
    UploadRecovery,
    UploadScenario,
    remote_objects,
)
from statecraft.proofs.oracle import CHECKPOINTS_ROOT, MANIFEST, iteration_name, touched_paths
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.storage.sim import SimWorld

__all__ = [
    "local_checkpoint_untouched",
    "marker_implies_verified_archive",
    "remote_manifest_implies_files",
    "retry_completes_without_reupload",
    "unarchived_checkpoint_never_pruned",
]

_RECEIPT = ".uploaded"
_CONTROL = frozenset({MANIFEST, "trainer.pt", "data.pt"})
_RETENTION_MARKS = (".retention-weights-only.json", ".retention-invalidated.json")


def _scenario(ctx: CheckContext) -> UploadScenario:
    return ctx.scenario


def _recovery(ctx: CheckContext) -> UploadRecovery:
    if not isinstance(ctx.recovery, UploadRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def _is_receipt(name: str) -> bool:
    base = posixpath.basename(name)
    return base == _RECEIPT or ".uploaded.tmp" in base


def _remote(ctx: CheckContext) -> dict[str, RemoteObjectSeen]:
    seen: dict[str, RemoteObjectSeen] = ctx.memo("remote", lambda: remote_objects(ctx.world))
    return seen


def _tree(world: SimWorld) -> dict[str, bytes]:
    return world.fs.tree(CHECKPOINTS_ROOT)


def _receipt(raw: bytes) -> dict[str, Any] | None:
    """A v1 receipt's document, or ``None`` (legacy one-liners, damaged bytes)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if isinstance(doc, dict) and doc.get("schema") == "statecraft.archive-marker.v1":
        return doc
    return None


def _describe(records: Iterable[IoRecord]) -> str:
    return "; ".join(f"#{r.index} {r.op} {r.target}" for r in records)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------- the checks
def marker_implies_verified_archive(ctx: CheckContext) -> None:
    """UPL-MARKER-VERIFIED: every v1 receipt of this destination lists objects that are
    remote with its sizes and sha256s (a setup's receipt of another bucket is not ours)."""
    remote = _remote(ctx)
    for path, raw in _tree(ctx.world).items():
        if posixpath.basename(path) != _RECEIPT:
            continue
        doc = _receipt(raw)
        if doc is None or doc.get("destination", {}).get("bucket") != "sim-bucket":
            continue
        ctx.exercised()
        iter_dir = path.split("/", 1)[0]
        prefix = doc["destination"]["prefix"]
        if prefix != f"{REMOTE_PREFIX}/{iter_dir}":
            raise GuaranteeViolation(f"{path} names prefix {prefix!r}, not this iteration's")
        for entry in doc["files"]:
            there = remote.get(f"{prefix}/{entry['path']}")
            if there is None:
                raise GuaranteeViolation(f"{path} lists {entry['path']}, which is not remote")
            if there.size != entry["size"]:
                raise GuaranteeViolation(
                    f"{path} lists {entry['path']} of {entry['size']} bytes; the remote object "
                    f"has {there.size}"
                )
            if entry["sha256"] is not None and _sha(there.data) != entry["sha256"]:
                raise GuaranteeViolation(
                    f"{path} lists {entry['path']} with sha256 {entry['sha256'][:12]}..; the "
                    "remote bytes differ"
                )


def remote_manifest_implies_files(ctx: CheckContext) -> None:
    """UPL-MANIFEST-LAST: a remote manifest lists only files that are remote, with its sizes."""
    remote = _remote(ctx)
    for key, seen in remote.items():
        if not key.endswith("/" + MANIFEST):
            continue
        ctx.exercised()
        prefix = key[: -len(MANIFEST) - 1]
        try:
            files = json.loads(seen.data)["files"]
        except (ValueError, KeyError, TypeError) as exc:
            raise GuaranteeViolation(f"remote {key} does not parse: {exc}") from None
        for name, entry in files.items():
            there = remote.get(f"{prefix}/{name}")
            if there is None or there.size != entry["size"]:
                found = "absent" if there is None else f"{there.size} bytes"
                raise GuaranteeViolation(
                    f"remote {key} lists {name} ({entry['size']} bytes), which is {found}"
                )


def local_checkpoint_untouched(ctx: CheckContext) -> None:
    """UPL-LOCAL-UNTOUCHED: the runs change no local name but receipts, and every file the
    setup left (receipts aside) is byte-identical (after the crash: to the setup's; after the
    retry: to what the retry found)."""
    runs: list[tuple[str, tuple[IoRecord, ...]]] = [("the upload", ctx.io_log)]
    if ctx.phase == "recovered":
        runs.append(("the retry", _recovery(ctx).retry_io))
    for who, log in runs:
        ctx.exercised()
        bad = [
            r
            for r in log
            if any(p.startswith("/") and not _is_receipt(p) for p in touched_paths(r))
        ]
        if bad:
            raise GuaranteeViolation(f"{who} changed local names: {_describe(bad[:4])}")
    if ctx.phase == "crashed":
        before, now = _tree(ctx.before), _tree(ctx.world)
    else:
        before, now = _recovery(ctx).retry_seen, _tree(ctx.world)
    for path, data in before.items():
        if _is_receipt(path):
            continue
        if now.get(path) != data:
            state = "removed" if path not in now else "changed"
            raise GuaranteeViolation(f"local {path} was {state} by the upload")


def _expected_right(
    scenario: UploadScenario, name: str, local: bytes, there: RemoteObjectSeen | None
) -> bool:
    """``there`` is the right object for local bytes ``local`` (size, and sha256 metadata
    when the upload hashes ``name``)."""
    if there is None or there.size != len(local):
        return False
    hashed = name in _CONTROL or len(local) <= scenario.hash_limit
    return not hashed or there.sha256 == _sha(local)


def retry_completes_without_reupload(ctx: CheckContext) -> None:
    """UPL-IDEMPOTENT: the retry of a checkpoint still committed on disk completes, the remote
    mirrors the local bytes, and no PUT re-sent an object that was already right."""
    s, recovery = _scenario(ctx), _recovery(ctx)
    iter_dir = iteration_name(s.target)
    local = {
        p[len(iter_dir) + 1 :]: d
        for p, d in recovery.retry_seen.items()
        if p.startswith(iter_dir + "/") and not _is_receipt(p)
    }
    if MANIFEST not in local or any(m in local for m in _RETENTION_MARKS):
        return  # nothing to archive any more (node loss, or retention removed it rightly)
    ctx.exercised()
    if recovery.retry.final_state != "uploaded":
        raise GuaranteeViolation(
            f"the retried upload ended in {recovery.retry.final_state!r}: {recovery.retry.error!r}"
        )
    remote = _remote(ctx)
    for name, data in local.items():
        there = remote.get(f"{s.remote_prefix}/{name}")
        if there is None or there.data != data:
            raise GuaranteeViolation(f"after the retry, remote {name} does not hold its bytes")
    receipt = _receipt(_tree(ctx.world).get(f"{iter_dir}/{_RECEIPT}", b""))
    if receipt is None or receipt["destination"]["prefix"] != s.remote_prefix:
        raise GuaranteeViolation("after the retry, iter_N/.uploaded is not a receipt of it")
    puts = [r for r in recovery.retry_io if r.op == "put"]
    for record in puts:
        name = record.target[len(s.remote_prefix) + 1 :]
        if name in local and _expected_right(
            s, name, local[name], recovery.remote_before.get(record.target)
        ):
            raise GuaranteeViolation(
                f"the retry PUT {name} again although it was already remote and right"
            )
    counts: dict[str, int] = {}
    for record in puts:
        counts[record.target] = counts.get(record.target, 0) + 1
    twice = sorted(k for k, n in counts.items() if n > 1)
    if twice:
        raise GuaranteeViolation(f"the retry PUT {twice} more than once")


def unarchived_checkpoint_never_pruned(ctx: CheckContext) -> None:
    """UPL-NEVER-PRUNED: retention with require_uploaded after the crash pruned the uploading
    checkpoint only if the bucket already held every one of its files with the right size."""
    s = _scenario(ctx)
    recovery = _recovery(ctx)
    if recovery.retained is None:
        return
    iter_dir = iteration_name(s.target)
    setup = {
        p: d
        for p, d in _tree(ctx.before).items()
        if p.startswith(iter_dir + "/") and not _is_receipt(p)
    }
    if not setup:
        return
    ctx.exercised()
    whole = all(recovery.retained.get(p) == d for p, d in setup.items()) and not any(
        f"{iter_dir}/{m}" in recovery.retained for m in _RETENTION_MARKS
    )
    if whole:
        return
    # pruned: every file must have been archived (the bucket as retention found it is the
    # bucket as the retry found it: retention never touches the bucket)
    for path, data in setup.items():
        there = recovery.remote_before.get(f"{REMOTE_PREFIX}/{path}")
        if there is None or there.size != len(data):
            raise GuaranteeViolation(
                f"retention pruned {iter_dir} although remote {path} is "
                f"{'absent' if there is None else f'{there.size} bytes'}: its archive was "
                "incomplete"
            )
