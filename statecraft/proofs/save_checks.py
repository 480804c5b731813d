"""The checks named by ``specs/save.toml`` and ``specs/resume.toml``.

They judge the disk with an independent oracle: they read the raw bytes of the simulated
disk, parse the manifest JSON themselves and hash every file themselves, instead of calling
the production verification they are meant to judge. Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found.
"""

from __future__ import annotations

import hashlib
import json
import re

import xxhash

from statecraft.proofs.save_scenarios import CHECKPOINTS_ROOT, Recovery, SaveScenario
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.storage.sim import SimWorld

__all__ = [
    "acknowledged_save_is_durable",
    "adopted_checkpoint_verifies",
    "committed_iterations_never_rewritten",
    "latest_names_complete_checkpoint",
    "newer_candidates_have_reasons",
    "no_newer_checkpoint_verifies",
    "node_loss_starts_fresh",
    "resume_lands_on_previous_or_new",
    "resumed_state_is_exact",
    "retry_commits_the_save",
]

_ITER = re.compile(r"^iter_(\d{9})$")
_MANIFEST = ".posttrain-manifest.json"
_FULL = ["model", "optimizer", "training_state"]


def _tree(world: SimWorld) -> dict[str, bytes]:
    return world.fs.tree(CHECKPOINTS_ROOT)


def _recorded_digest(entry: dict) -> str:
    """The digest a manifest entry records: v2 ``digest.value`` or v1 ``sha256``."""
    return entry["digest"]["value"] if "digest" in entry else entry["sha256"]


def _hex_digest(data: bytes, entry: dict) -> str:
    """``data`` hashed with the entry's algorithm, computed here (not by statecraft.storage)."""
    algorithm = entry["digest"]["algorithm"] if "digest" in entry else "sha256"
    if algorithm == "xxh3_128":
        return xxhash.xxh3_128_hexdigest(data)
    return hashlib.new(algorithm, data).hexdigest()


def _oracle_problem(tree: dict[str, bytes], iteration: int) -> str | None:
    """Why ``iteration`` is not a complete, intact checkpoint on this disk (None if it is)."""
    name = f"iter_{iteration:09d}"
    raw = tree.get(f"{name}/{_MANIFEST}")
    if raw is None:
        return f"{name} has no manifest"
    try:
        manifest = json.loads(raw)
        files = manifest["files"]
        if manifest["iteration"] != iteration or manifest["components"] != _FULL:
            found = f"{manifest['iteration']} / {manifest['components']}"
            return f"{name} manifest names iteration {found}"
    except (ValueError, KeyError, TypeError) as exc:
        return f"{name} manifest unreadable: {exc!r}"
    for file_name, entry in files.items():
        data = tree.get(f"{name}/{file_name}")
        if data is None:
            return f"{name}/{file_name} is missing"
        if len(data) != entry["size"] or _hex_digest(data, entry) != _recorded_digest(entry):
            return f"{name}/{file_name} does not match its manifest ({len(data)} bytes)"
    if "trainer.pt" not in files or "model.pt" not in files:
        return f"{name} manifest lacks trainer.pt or model.pt"
    return None


def _iterations(tree: dict[str, bytes]) -> list[int]:
    found = {m.group(1) for p in tree for m in [_ITER.match(p.split("/", 1)[0])] if m}
    return sorted(int(i) for i in found)


def _verified(tree: dict[str, bytes]) -> list[int]:
    return [i for i in _iterations(tree) if _oracle_problem(tree, i) is None]


def _latest(tree: dict[str, bytes]) -> int | None:
    raw = tree.get("latest_checkpoint.txt")
    if raw is None:
        return None
    match = _ITER.match(raw.decode(errors="replace").strip())
    if match is None:
        raise GuaranteeViolation(f"latest_checkpoint.txt holds {raw[:40]!r}, not an iteration name")
    return int(match.group(1))


def _recovery(ctx: CheckContext) -> Recovery:
    if not isinstance(ctx.recovery, Recovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def _scenario(ctx: CheckContext) -> SaveScenario:
    return ctx.scenario


# ------------------------------------------------------------------------- save spec
def latest_names_complete_checkpoint(ctx: CheckContext) -> None:
    """SAVE-LATEST: the pointer, when present, names a complete checkpoint."""
    tree = _tree(ctx.world)
    latest = _latest(tree)
    if latest is None:
        return
    before = _tree(ctx.before)
    if latest == _latest(before) and _oracle_problem(before, latest) is not None:
        return  # damaged before this save began (the scenario's injected bit rot), not by it
    problem = _oracle_problem(tree, latest)
    if problem is not None:
        raise GuaranteeViolation(f"latest_checkpoint.txt names iter {latest}, but {problem}")


def committed_iterations_never_rewritten(ctx: CheckContext) -> None:
    """SAVE-IMMUTABLE: every file of an iteration committed before the save is unchanged."""
    before = _tree(ctx.before)
    after = _tree(ctx.world)
    for iteration in _verified(before):
        prefix = f"iter_{iteration:09d}/"
        committed = json.loads(before[prefix + _MANIFEST])["files"]
        for file_name in [*committed, _MANIFEST]:
            if after.get(prefix + file_name) != before[prefix + file_name]:
                raise GuaranteeViolation(f"committed {prefix}{file_name} changed or vanished")


def resume_lands_on_previous_or_new(ctx: CheckContext) -> None:
    """SAVE-RESUME: after the crash, resume=auto adopts the previous complete checkpoint or
    the new one, and loads exactly its state."""
    scenario = _scenario(ctx)
    recovery = _recovery(ctx)
    before_verified = _verified(_tree(ctx.before))
    previous = max(before_verified) if before_verified else 0
    allowed = {previous, scenario.target}
    if recovery.resume.step not in allowed:
        raise GuaranteeViolation(
            f"resume=auto adopted step {recovery.resume.step}; allowed: {sorted(allowed)} "
            f"(passed over: {[p.name for p in recovery.resume.passed_over]})"
        )
    if recovery.resume.resumed and recovery.loaded_weight != float(recovery.resume.step):
        raise GuaranteeViolation(
            f"resumed iteration {recovery.resume.step} but loaded weights of "
            f"{recovery.loaded_weight}"
        )


def acknowledged_save_is_durable(ctx: CheckContext) -> None:
    """SAVE-DURABLE: once save returned, the new iteration is committed and latest names it."""
    if not ctx.acknowledged:
        return
    scenario = _scenario(ctx)
    tree = _tree(ctx.world)
    problem = _oracle_problem(tree, scenario.target)
    if problem is not None or _latest(tree) != scenario.target:
        raise GuaranteeViolation(
            f"save of iter {scenario.target} returned, yet after the crash: "
            f"{problem or f'latest names {_latest(tree)}'}"
        )


def retry_commits_the_save(ctx: CheckContext) -> None:
    """SAVE-RETRY: the retried save commits the iteration, latest names it, resume adopts it,
    and no writer leftovers remain."""
    scenario = _scenario(ctx)
    recovery = _recovery(ctx)
    tree = _tree(ctx.world)
    problem = _oracle_problem(tree, scenario.target)
    if problem is not None:
        raise GuaranteeViolation(f"after the retry, {problem}")
    if _latest(tree) != scenario.target:
        raise GuaranteeViolation(
            f"after the retry latest names {_latest(tree)}, not {scenario.target}"
        )
    if recovery.resume_after.step != scenario.target:
        raise GuaranteeViolation(f"after the retry resume=auto adopts {recovery.resume_after.step}")
    leftovers = [p for p in tree if ".tmp-" in p.rsplit("/", 1)[-1]]
    if leftovers:
        raise GuaranteeViolation(f"writer temporaries left after the retry: {leftovers}")


def node_loss_starts_fresh(ctx: CheckContext) -> None:
    """SAVE-NODE-LOSS: with the local disk gone, resume starts fresh instead of failing."""
    recovery = _recovery(ctx)
    if recovery.resume.resumed or recovery.resume.step != 0:
        raise GuaranteeViolation(f"after node loss resume adopted {recovery.resume.source}")


# ----------------------------------------------------------------------- resume spec
def adopted_checkpoint_verifies(ctx: CheckContext) -> None:
    """RESUME-VERIFIED: the adopted checkpoint passes the independent oracle."""
    recovery = _recovery(ctx)
    if not recovery.resume.resumed:
        return
    # The oracle judges the disk as resume saw it: before the retry rewrote anything.
    problem = _oracle_problem(_tree(ctx.world), recovery.resume.step)
    if problem is not None and recovery.resume.step != _scenario(ctx).target:
        raise GuaranteeViolation(f"resume adopted iter {recovery.resume.step} but {problem}")


def no_newer_checkpoint_verifies(ctx: CheckContext) -> None:
    """RESUME-NEWEST: no iteration newer than the adopted one was intact when resume ran."""
    recovery = _recovery(ctx)
    crashed = _tree(ctx.world)
    newer = [
        i for i in _verified(crashed) if i > recovery.resume.step and i != _scenario(ctx).target
    ]
    if newer:
        raise GuaranteeViolation(
            f"resume adopted step {recovery.resume.step} though {newer} verify"
        )


def newer_candidates_have_reasons(ctx: CheckContext) -> None:
    """RESUME-REASONS: every newer iteration directory passed over carries a reason."""
    recovery = _recovery(ctx)
    reasons = {p.name: p.reason for p in recovery.resume.passed_over}
    for name, reason in reasons.items():
        if not reason.strip():
            raise GuaranteeViolation(f"{name} was passed over without a reason")
    step = recovery.resume.step
    if recovery.resume.resumed:
        expected = [p.name for p in recovery.resume.passed_over]
        if any(int(n[5:]) <= step for n in expected):
            raise GuaranteeViolation(f"passed over {expected}, not all newer than {step}")


def resumed_state_is_exact(ctx: CheckContext) -> None:
    """RESUME-EXACT: the tracked objects hold the adopted checkpoint's model and data state."""
    recovery = _recovery(ctx)
    if not recovery.resume.resumed:
        return
    step = recovery.resume.step
    if recovery.loaded_weight != float(step):
        raise GuaranteeViolation(
            f"adopted iter {step} but the model holds {recovery.loaded_weight}"
        )
    if _scenario(ctx).with_data and recovery.loaded_position != step:
        raise GuaranteeViolation(
            f"adopted iter {step} but the data cursor holds {recovery.loaded_position}"
        )
