"""The checks named by ``specs/direct_save.toml``.

They judge with the simulated bucket's raw objects, JSON parsed here, digests recomputed here
and the operations the runs performed (the gate's log). Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found and calls
``ctx.exercised()`` only when it asserted something in the state it was given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME
from statecraft.engine.crash import IoRecord
from statecraft.proofs.direct.scenarios import (
    LEASE_KEY,
    ROOT_PREFIX,
    WRITER_B,
    DirectRecovery,
    DirectScenario,
    bucket_objects,
    committed_iterations,
    control_payloads,
    shard_objects,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.storage.digest import Digest

__all__ = [
    "acknowledged_save_is_durable",
    "committed_iteration_never_rewritten",
    "incomplete_reason",
    "latest_names_complete_checkpoint",
    "latest_never_backwards",
    "manifest_names_every_rank",
    "plan_drift_fails_closed",
    "retry_completes",
    "stale_writer_changes_nothing",
]

_ITER = re.compile(r"^iter_(\d{9})$")


def _scenario(ctx: CheckContext) -> DirectScenario:
    return ctx.scenario


def _recovery(ctx: CheckContext) -> DirectRecovery:
    if not isinstance(ctx.recovery, DirectRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def _objects(ctx: CheckContext) -> dict[str, bytes]:
    seen: dict[str, bytes] = ctx.memo("objects", lambda: bucket_objects(ctx.world))
    return seen


def _latest(objects: Mapping[str, bytes]) -> int | None:
    raw = objects.get(LATEST_POINTER)
    if raw is None:
        return None
    match = _ITER.match(raw.decode(errors="replace").strip())
    if match is None:
        raise GuaranteeViolation(f"{LATEST_POINTER} holds {raw[:40]!r}, not an iteration")
    return int(match.group(1))


def _iter(n: int) -> str:
    return f"iter_{n:09d}"


def incomplete_reason(
    objects: Mapping[str, bytes], iter_dir: str, *, real_dcp: bool = False
) -> str | None:
    """Why ``iter_dir`` is not a complete committed checkpoint (``None``: it is): its
    manifest parses, every object it names is there with its size and digest, every
    component's ``.metadata`` is named and names shards that are there, and every rank of the
    plan has a shard in every component.

    ``real_dcp``: the shards were written by DCP itself (the resume scenarios), whose
    ``.metadata`` is a pickle this oracle never unpickles: it is checked for presence, size and
    digest only (the scenarios' simulated ``.metadata`` is JSON listing the shards)."""
    raw = objects.get(f"{iter_dir}/{MANIFEST_NAME}")
    if raw is None:
        return "it holds no manifest"
    try:
        doc = json.loads(raw)
        files: dict[str, Any] = doc["files"]
        control: dict[str, Any] = doc["control"]
        components: list[str] = list(doc["components"].values())
        world_size = int(doc["writer"]["world_size"])
        generation = doc["control_generation"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"its manifest does not parse: {exc!r}"
    named = {f"{iter_dir}/{p}": e for p, e in files.items()}
    named |= {f"{iter_dir}/.posttrain/generations/{generation}/{n}": e for n, e in control.items()}
    for path, entry in named.items():
        data = objects.get(path)
        if data is None:
            return f"its manifest names {path}, which is absent"
        digest = entry["digest"]
        actual = Digest.of(data, digest["algorithm"]).value
        if len(data) != entry["size"] or actual != digest["value"]:
            return f"its manifest names {path} ({entry['size']} bytes), whose bytes differ"
    if "trainer.pt" not in control:
        return "its manifest names no trainer.pt"
    for component in components:
        if f"{component}/.metadata" not in files:
            return f"its manifest names no {component}/.metadata"
        shards = [] if real_dcp else json.loads(objects[f"{iter_dir}/{component}/.metadata"])
        for shard in shards:
            if f"{component}/{shard}" not in files:
                return f"{component}/.metadata names {shard}, which the manifest does not"
        for rank in range(world_size):
            if not any(re.fullmatch(rf"{component}/__{rank}_\d+\.distcp", p) for p in files):
                return f"its manifest names no shard of rank {rank} in {component}"
    return None


def _describe(records: Iterable[IoRecord]) -> str:
    return "; ".join(f"#{r.index} {r.op} {r.target}" for r in records)


# ------------------------------------------------------------------------- the checks
def latest_names_complete_checkpoint(ctx: CheckContext) -> None:
    """DS-LATEST-COMPLETE: latest, whenever it exists, names a complete committed checkpoint
    (and after a crash of any kind that is the setup's newest or the saved iteration)."""
    objects = _objects(ctx)
    latest = _latest(objects)
    if latest is None:
        return
    ctx.exercised()
    why = incomplete_reason(objects, _iter(latest))
    if why is not None:
        raise GuaranteeViolation(f"latest names {_iter(latest)}, but {why}")
    s = _scenario(ctx)
    allowed = {*s.previous, s.plan.iteration}
    if latest not in allowed:
        raise GuaranteeViolation(f"latest names {_iter(latest)}, none of {sorted(allowed)}")


def manifest_names_every_rank(ctx: CheckContext) -> None:
    """DS-MANIFEST-COMPLETE: every manifest under the root names only objects that are there
    with its size and digest, and a shard of every rank in every component."""
    objects = _objects(ctx)
    for iter_dir in sorted(committed_iterations(objects)):
        ctx.exercised()
        why = incomplete_reason(objects, iter_dir)
        if why is not None:
            raise GuaranteeViolation(f"{iter_dir} holds a manifest, but {why}")


def latest_never_backwards(ctx: CheckContext) -> None:
    """DS-LATEST-MONOTONE: latest never names an older iteration than the setup's, and never
    disappears once it existed."""
    before = _latest(bucket_objects(ctx.before))
    if before is None:
        return
    ctx.exercised()
    now = _latest(_objects(ctx))
    if now is None or now < before:
        raise GuaranteeViolation(
            f"latest moved backwards: {_iter(before)} before, {now and _iter(now)} now"
        )


def _puts_under(log: Iterable[IoRecord], iter_dirs: set[str]) -> list[IoRecord]:
    base = ROOT_PREFIX + "/"
    return [
        r
        for r in log
        if r.op in ("put", "delete")
        and r.target.startswith(base)
        and r.target[len(base) :].split("/", 1)[0] in iter_dirs
    ]


def committed_iteration_never_rewritten(ctx: CheckContext) -> None:
    """DS-COMMITTED-IMMUTABLE: every object of an iteration that held a manifest when a run
    started is byte-identical afterwards, and no run sends a PUT or DELETE under it."""
    before = bucket_objects(ctx.before)
    committed = committed_iterations(before)
    runs: list[tuple[str, tuple[IoRecord, ...], set[str]]] = [("the save", ctx.io_log, committed)]
    if ctx.phase == "recovered":
        recovery = _recovery(ctx)
        runs.append(("the retry", recovery.retry_io, committed_iterations(recovery.seen)))
    for who, log, iter_dirs in runs:
        if not iter_dirs:
            continue
        ctx.exercised()
        bad = _puts_under(log, iter_dirs)
        if bad:
            raise GuaranteeViolation(f"{who} wrote under committed {sorted(iter_dirs)}: "
                                     f"{_describe(bad[:4])}")  # fmt: skip
    now = _objects(ctx)
    for path, data in before.items():
        if path.split("/", 1)[0] in committed and now.get(path) != data:
            state = "removed" if path not in now else "changed"
            raise GuaranteeViolation(f"committed {path} was {state}")


def acknowledged_save_is_durable(ctx: CheckContext) -> None:
    """DS-DURABLE-ON-RETURN: once the save returned, latest names the iteration and it is
    complete, whatever the crash (only the bucket survives a node loss)."""
    s = _scenario(ctx)
    if not ctx.acknowledged or s.expect_failure is not None:
        return
    ctx.exercised()
    objects = _objects(ctx)
    if _latest(objects) != s.plan.iteration:
        raise GuaranteeViolation(f"the save returned but latest names {_latest(objects)}")
    why = incomplete_reason(objects, s.iter_dir)
    if why is not None:
        raise GuaranteeViolation(f"the save returned but {s.iter_dir} is incomplete: {why}")


def retry_completes(ctx: CheckContext) -> None:
    """DS-RETRY-COMPLETES: after any crash, the retried save of the same plan ends committed
    with latest naming the iteration and the bytes this save meant (shards, control), or, in
    a fail-closed scenario, fails with the expected error."""
    s, recovery = _scenario(ctx), _recovery(ctx)
    if s.expect_failure is not None:
        return
    ctx.exercised()
    if recovery.retry.final_state != "committed":
        raise GuaranteeViolation(
            f"the retry ended {recovery.retry.final_state!r}: {recovery.retry.error!r}"
        )
    objects = _objects(ctx)
    if _latest(objects) != s.plan.iteration:
        raise GuaranteeViolation(f"after the retry latest names {_latest(objects)}")
    doc = json.loads(objects[f"{s.iter_dir}/{MANIFEST_NAME}"])
    for path, data in shard_objects(s.plan, "run").items():
        if objects.get(path) != data:
            raise GuaranteeViolation(f"after the retry {path} does not hold the save's bytes")
    base = f"{s.iter_dir}/.posttrain/generations/{doc['control_generation']}"
    for name, data in control_payloads(s.plan, "run").items():
        if objects.get(f"{base}/{name}") != data:
            raise GuaranteeViolation(f"after the retry the active {name} is not the save's")


def _lease_owner(objects: Mapping[str, bytes]) -> str | None:
    raw = objects.get(LEASE_KEY[len(ROOT_PREFIX) + 1 :])
    return None if raw is None else json.loads(raw).get("host")


def stale_writer_changes_nothing(ctx: CheckContext) -> None:
    """DS-STALE-WRITER: once another writer took the lease over, the stale writer (the run and
    its retry) creates no manifest of the iteration and latest stays what the setup left."""
    s = _scenario(ctx)
    objects = _objects(ctx)
    if not s.takeover_during or _lease_owner(objects) != WRITER_B:
        return
    ctx.exercised()
    if f"{s.iter_dir}/{MANIFEST_NAME}" in objects:
        raise GuaranteeViolation(f"the stale writer committed {s.iter_dir}")
    before = bucket_objects(ctx.before).get(LATEST_POINTER)
    if objects.get(LATEST_POINTER) != before:
        raise GuaranteeViolation("the stale writer moved latest")
    if ctx.phase == "recovered":
        retry = _recovery(ctx).retry
        if retry.final_state != "failed" or type(retry.error).__name__ != "WriterLeaseError":
            raise GuaranteeViolation(
                f"the stale writer's retry ended {retry.final_state!r} ({retry.error!r}), "
                "not failed with WriterLeaseError"
            )


def plan_drift_fails_closed(ctx: CheckContext) -> None:
    """DS-PLAN-DRIFT: a save of a committed iteration with another plan fails with
    PlanDriftError and sends no write at all (the run and its retry)."""
    s = _scenario(ctx)
    if not s.drift:
        return
    ctx.exercised()
    logs = [("the save", ctx.io_log)]
    if ctx.phase == "recovered":
        recovery = _recovery(ctx)
        logs.append(("the retry", recovery.retry_io))
        if type(recovery.retry.error).__name__ != "PlanDriftError":
            raise GuaranteeViolation(
                f"the drifting retry ended {recovery.retry.final_state!r} "
                f"({recovery.retry.error!r}), not PlanDriftError"
            )
    for who, log in logs:
        writes = [r for r in log if r.op in ("put", "delete") and r.target != LEASE_KEY]
        if writes:
            raise GuaranteeViolation(f"{who} with a drifting plan wrote: {_describe(writes[:4])}")
