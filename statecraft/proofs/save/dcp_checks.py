"""The checks named by ``specs/dcp_save.toml``.

They judge with an oracle of their own over the raw bytes (:func:`dcp_problem`: the manifest
parsed as JSON, every recorded file hashed, ``.metadata`` unpickled as DCP ``Metadata``,
``trainer.pt`` loaded with ``weights_only=True``) and with the store operations the runs
performed. Each raises :class:`~statecraft.proofs.GuaranteeViolation` with what it found and
calls ``ctx.exercised()`` when it asserted something.
"""

from __future__ import annotations

import json
import pickle
import re

from torch.distributed.checkpoint.metadata import Metadata

from statecraft.proofs.oracle import (
    MANIFEST,
    POINTER,
    DiskView,
    digest_of,
    iteration_name,
    load_payload,
    recorded_digest,
)
from statecraft.proofs.save.checks import (
    before_view,
    committed_iterations_never_rewritten,
    recovery_of,
    world_view,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation

__all__ = [
    "acknowledged_save_is_durable",
    "committed_iterations_never_rewritten",
    "dcp_problem",
    "latest_names_complete_checkpoint",
    "manifest_names_only_durable_shards",
    "resume_lands_on_previous_or_new",
    "retry_commits_the_save",
]

_SHARD = re.compile(r"^(model|optim)/__\d+_\d+\.distcp$")
_CONTROL = {"trainer.pt", "data.pt"}


def dcp_problem(view: DiskView, iteration: int) -> str | None:
    """Why ``iteration`` is not a complete, intact DCP checkpoint in ``view`` (None if it is):
    a manifest of format ``dcp`` recording ``model/.metadata``, ``optim/.metadata``, at least
    one shard of each, ``trainer.pt`` and nothing else; every recorded file present with its
    size and digest; each ``.metadata`` a DCP ``Metadata`` whose items lie in recorded shards;
    ``trainer.pt`` loadable and naming the iteration."""
    name = iteration_name(iteration)
    raw = view.files.get(f"{name}/{MANIFEST}")
    if raw is None:
        return f"{name} has no manifest"
    try:
        manifest = json.loads(raw)
        recorded = {f: (int(e["size"]), recorded_digest(e)) for f, e in manifest["files"].items()}
        if manifest["format"] != "dcp" or manifest["iteration"] != iteration:
            return f"{name} manifest is {manifest['format']!r} of iteration {manifest['iteration']}"
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{name} manifest unreadable: {exc!r}"
    needed = {"model/.metadata", "optim/.metadata", "trainer.pt"}
    if not needed <= set(recorded):
        return f"{name} manifest lacks {sorted(needed - set(recorded))}"
    stray = [f for f in recorded if f not in needed | _CONTROL and not _SHARD.match(f)]
    if stray:
        return f"{name} manifest records files outside the DCP layout: {stray}"
    for component in ("model", "optim"):
        if not any(f.startswith(f"{component}/__") for f in recorded):
            return f"{name} manifest records no shard of {component}/"
    for file_name, (size, digest) in sorted(recorded.items()):
        data = view.files.get(f"{name}/{file_name}")
        if data is None:
            return f"{name}/{file_name} is missing"
        if len(data) != size or digest_of(data, digest[0]) != digest[1]:
            return f"{name}/{file_name} does not match its manifest ({len(data)} bytes)"
    for component in ("model", "optim"):
        try:
            metadata = pickle.loads(view.files[f"{name}/{component}/.metadata"])
        except Exception as exc:  # the oracle's own parse
            return f"{name}/{component}/.metadata does not unpickle: {exc!r}"
        if not isinstance(metadata, Metadata):
            return f"{name}/{component}/.metadata is a {type(metadata).__name__}"
        for info in (metadata.storage_data or {}).values():
            if f"{component}/{info.relative_path}" not in recorded:
                return f"{name}/{component}/.metadata names unrecorded {info.relative_path}"
    loaded, trainer = load_payload(view.files[f"{name}/trainer.pt"])
    if not loaded or not isinstance(trainer, dict) or trainer.get("optimizer_step") != iteration:
        return f"{name}/trainer.pt does not record optimizer_step {iteration}"
    return None


def _verified(view: DiskView) -> list[int]:
    return [i for i in view.iterations() if dcp_problem(view, i) is None]


def latest_names_complete_checkpoint(ctx: CheckContext) -> None:
    """DCP-SAVE-LATEST: the pointer, when present, names a complete DCP checkpoint (unless it
    is the damaged starting pointer, untouched)."""
    now, before = world_view(ctx), before_view(ctx)
    if now.pointer_raw() is None:
        return
    if now.pointer_raw() == before.pointer_raw():
        previous = before.pointer_or_none()
        if previous is None or dcp_problem(before, previous) is not None:
            return
    ctx.exercised()
    latest = now.pointer()
    assert latest is not None
    problem = dcp_problem(now, latest)
    if problem is not None:
        raise GuaranteeViolation(f"{POINTER} names iter {latest}, but {problem}")


def manifest_names_only_durable_shards(ctx: CheckContext) -> None:
    """DCP-SHARDS-BEFORE-MANIFEST: whenever the saved iteration has a manifest, every file it
    records is there with its recorded bytes (after process kill and power loss alike)."""
    now = world_view(ctx)
    target = ctx.scenario.target
    if f"{iteration_name(target)}/{MANIFEST}" not in now.files:
        return
    ctx.exercised()
    problem = dcp_problem(now, target)
    if problem is not None:
        raise GuaranteeViolation(f"the manifest of iter {target} exists, but {problem}")


def resume_lands_on_previous_or_new(ctx: CheckContext) -> None:
    """DCP-SAVE-RESUME: resume=auto adopts the previous complete checkpoint or the new one and
    the DCP load gives exactly its state (every weight equals the iteration)."""
    scenario = ctx.scenario
    recovery = recovery_of(ctx)
    ctx.exercised()
    verified = _verified(before_view(ctx))
    previous = max(verified) if verified else 0
    allowed = {previous, scenario.target}
    resume = recovery.resume
    if resume.step not in allowed:
        raise GuaranteeViolation(
            f"resume=auto adopted step {resume.step}; allowed: {sorted(allowed)} "
            f"(passed over: {[(p.name, p.reason) for p in resume.passed_over]})"
        )
    loaded = recovery.first.loaded
    if resume.resumed:
        weight = None if loaded is None else loaded.model["weight"].flatten().tolist()
        if weight is None or any(w != float(resume.step) for w in weight):
            raise GuaranteeViolation(f"resumed iteration {resume.step} but loaded weights {weight}")
        state = None if loaded is None else loaded.optimizer["state"]
        avg = [float(s["exp_avg"].flatten()[0]) for s in (state or {}).values()]
        if not avg or any(a != resume.step + 0.25 for a in avg):
            raise GuaranteeViolation(f"resumed iteration {resume.step} but exp_avg {avg}")


def acknowledged_save_is_durable(ctx: CheckContext) -> None:
    """DCP-SAVE-DURABLE: once save returned, the new iteration is committed and latest names
    it."""
    if not ctx.acknowledged:
        return
    ctx.exercised()
    target = ctx.scenario.target
    now = world_view(ctx)
    problem = dcp_problem(now, target)
    if problem is not None or now.pointer() != target:
        raise GuaranteeViolation(
            f"save of iter {target} returned, yet after the crash: "
            f"{problem or f'latest names {now.pointer()}'}"
        )


def retry_commits_the_save(ctx: CheckContext) -> None:
    """DCP-SAVE-RETRY: the retried save commits the iteration, latest names it, resume adopts
    it, and no writer temporaries remain."""
    target = ctx.scenario.target
    recovery = recovery_of(ctx)
    ctx.exercised()
    now = world_view(ctx)
    problem = dcp_problem(now, target)
    if problem is not None:
        raise GuaranteeViolation(f"after the retry, {problem}")
    if now.pointer() != target:
        raise GuaranteeViolation(f"after the retry latest names {now.pointer()}, not {target}")
    if recovery.resume_after.step != target:
        raise GuaranteeViolation(f"after the retry resume=auto adopts {recovery.resume_after.step}")
    leftovers = [p for p in now.files if ".tmp-" in p.rsplit("/", 1)[-1]]
    if leftovers:
        raise GuaranteeViolation(f"writer temporaries left after the retry: {leftovers}")
