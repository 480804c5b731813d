"""The checks named by ``specs/archive_prune.toml``. They judge the simulated bucket's objects
(raw bytes, JSON parsed here) against the bucket the setup left; each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found and calls
``ctx.exercised()`` only when it asserted something in the state it was given."""

from __future__ import annotations

import json

from statecraft.proofs.archive.prune_scenarios import ArchivePruneScenario, PruneRecovery
from statecraft.proofs.oracle import MANIFEST
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "no_published_iteration_is_torn",
    "other_keys_untouched",
    "rerun_removes_the_iteration",
]


def _scenario(ctx: CheckContext) -> ArchivePruneScenario:
    return ctx.scenario


def _objects(ctx: CheckContext, before: bool = False) -> dict[str, bytes]:
    bucket = (ctx.before if before else ctx.world).bucket
    return {key: data for key, (data, _) in bucket.objects.items()}


def no_published_iteration_is_torn(ctx: CheckContext) -> None:
    """AP-NEVER-TORN: while the pruned iteration's commit record is in the bucket, every file
    it lists is an object with the listed size."""
    prefix = _scenario(ctx).key_prefix
    objects = _objects(ctx)
    manifest = objects.get(f"{prefix}/{MANIFEST}")
    if manifest is None:
        return
    ctx.exercised()
    try:
        files = json.loads(manifest)["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise GuaranteeViolation(f"{prefix}/{MANIFEST} does not parse: {exc}") from None
    for name, entry in files.items():
        there = objects.get(f"{prefix}/{name}")
        if there is None or len(there) != entry["size"]:
            found = "absent" if there is None else f"{len(there)} bytes"
            raise GuaranteeViolation(
                f"{prefix}/{MANIFEST} is still published but lists {name} ({entry['size']} "
                f"bytes), which is {found}: a torn published iteration"
            )


def other_keys_untouched(ctx: CheckContext) -> None:
    """AP-OTHERS-UNTOUCHED: every object the setup left outside ``<prefix>/iter_N/`` is
    byte-identical."""
    prefix = f"{_scenario(ctx).key_prefix}/"
    now = _objects(ctx)
    for key, data in _objects(ctx, before=True).items():
        if key.startswith(prefix):
            continue
        ctx.exercised()
        if now.get(key) != data:
            what = "deleted" if key not in now else "rewritten"
            raise GuaranteeViolation(f"{key}, outside the pruned {prefix}, was {what}")


def rerun_removes_the_iteration(ctx: CheckContext) -> None:
    """AP-RERUN: after any crash the rerun prune succeeds and leaves no object under
    ``<prefix>/iter_N/``."""
    recovery = ctx.recovery
    if not isinstance(recovery, PruneRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {recovery!r}")
    ctx.exercised()
    if recovery.rerun.failed:
        raise GuaranteeViolation(f"the rerun prune failed: {recovery.rerun!r}")
    if recovery.left:
        raise GuaranteeViolation(f"the rerun prune left {list(recovery.left)}")
