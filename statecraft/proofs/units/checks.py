"""The checks named by ``specs/unit_seal.toml`` and ``specs/unit_prune.toml``.

They judge with an oracle of their own: the raw simulated-disk bytes, the commit manifest's
JSON parsed here and every file hashed here (:func:`~statecraft.proofs.oracle.digest_of`),
never the production ``verify_unit`` they are meant to judge. Each raises
:class:`~statecraft.proofs.GuaranteeViolation` with what it found, and calls
``ctx.exercised()`` when it actually asserted something in the state it was given.
"""

from __future__ import annotations

import json

from statecraft.proofs.oracle import digest_of, recorded_digest, touched_paths
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.proofs.units.scenarios import SLOT, UNITS_ROOT, UnitRecovery, UnitScenario
from statecraft.storage.local import is_temporary_name
from statecraft.storage.sim import SimWorld

__all__ = [
    "acknowledged_prune_is_durable",
    "acknowledged_seal_is_durable",
    "committed_units_never_rewritten",
    "every_commit_names_durable_files",
    "no_half_deleted_unit_looks_committed",
    "reader_adopts_newest_committed",
    "refused_seal_touches_nothing",
    "replaced_unit_retired_only_after_commit",
    "rerun_prune_removes_the_unit",
    "retry_commits_the_new_unit",
    "some_committed_unit_always_exists",
]

MANIFEST = ".statecraft-commit.json"


def scenario_of(ctx: CheckContext) -> UnitScenario:
    return ctx.scenario


def recovery_of(ctx: CheckContext) -> UnitRecovery:
    if not isinstance(ctx.recovery, UnitRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def _tree(world: SimWorld) -> dict[str, bytes]:
    return world.fs.tree(UNITS_ROOT)


def _units(tree: dict[str, bytes]) -> set[str]:
    """Every directory holding a commit manifest (relative to the root)."""
    return {p[: -len(MANIFEST) - 1] for p in tree if p.endswith("/" + MANIFEST)}


def unit_problem(tree: dict[str, bytes], unit: str) -> str | None:
    """Why ``unit`` is not a committed, intact unit in ``tree`` (``None`` when it is)."""
    raw = tree.get(f"{unit}/{MANIFEST}")
    if raw is None:
        return f"{unit} has no commit manifest"
    try:
        recorded = json.loads(raw)["files"]
        entries = {name: (int(e["size"]), recorded_digest(e)) for name, e in recorded.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{unit} commit manifest unreadable: {exc!r}"
    prefix = unit + "/"
    present = {
        p[len(prefix) :]
        for p in tree
        if p.startswith(prefix) and p != f"{unit}/{MANIFEST}"
        and not is_temporary_name(p.rsplit("/", 1)[-1])
    }  # fmt: skip
    if present != set(entries):
        return f"{unit} holds {sorted(present)}, its commit names {sorted(entries)}"
    for name, (size, (algorithm, value)) in sorted(entries.items()):
        data = tree[f"{unit}/{name}"]
        if len(data) != size or digest_of(data, algorithm) != value:
            return f"{unit}/{name} ({len(data)} bytes) does not match its commit ({size} bytes)"
    return None


def unit_files(tree: dict[str, bytes], unit: str) -> dict[str, bytes]:
    prefix = unit + "/"
    return {
        p[len(prefix) :]: data
        for p, data in tree.items()
        if p.startswith(prefix) and p != f"{unit}/{MANIFEST}"
        and not is_temporary_name(p.rsplit("/", 1)[-1])
    }  # fmt: skip


def _committed(tree: dict[str, bytes]) -> set[str]:
    return {u for u in _units(tree) if unit_problem(tree, u) is None}


# ----------------------------------------------------------------------------- unit_seal
def every_commit_names_durable_files(ctx: CheckContext) -> None:
    """US-COMMIT-COMPLETE: every commit manifest names exactly the unit's files, each with
    its size and digest."""
    tree = _tree(ctx.world)
    for unit in sorted(_units(tree)):
        ctx.exercised()
        problem = unit_problem(tree, unit)
        if problem is not None:
            raise GuaranteeViolation(f"a commit manifest promises what is not there: {problem}")


def some_committed_unit_always_exists(ctx: CheckContext) -> None:
    """US-ONE-COMMITTED: a committed unit holding the previous or the new content always
    exists (the setup's committed unit is never lost before a newer one is committed)."""
    scenario = scenario_of(ctx)
    tree = _tree(ctx.world)
    committed = _committed(tree)
    before = _committed(_tree(ctx.before))
    if not before:
        return
    ctx.exercised()
    owners = {scenario.payload_owner(unit_files(tree, u)) for u in committed}
    if not owners & {"old", "new"}:
        raise GuaranteeViolation(
            f"no committed unit holds the previous or the new content (committed: "
            f"{sorted(committed)}; before the run: {sorted(before)})"
        )


def reader_adopts_newest_committed(ctx: CheckContext) -> None:
    """US-READER: after any crash the reader adopts the newest committed unit, holding the
    previous or the new content, the new one when the seal had returned; never none."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    if scenario.kind not in ("slot", "folder"):
        return
    ctx.exercised()
    if recovery.adopted is None:
        raise GuaranteeViolation(f"the reader adopted nothing; passed over {recovery.passed_over}")
    owner = scenario.payload_owner(recovery.adopted_files)
    if owner is None:
        raise GuaranteeViolation(
            f"the reader adopted {recovery.adopted}, whose files are neither the previous nor "
            f"the new content: {sorted(recovery.adopted_files)}"
        )
    if ctx.acknowledged and owner != "new":
        raise GuaranteeViolation(
            f"the seal had returned, but the reader adopted {recovery.adopted} ({owner})"
        )


def acknowledged_seal_is_durable(ctx: CheckContext) -> None:
    """US-DURABLE-ON-RETURN: once the seal returned, the new unit is committed with the new
    content and every unit it replaced is gone."""
    scenario = scenario_of(ctx)
    if not ctx.acknowledged or scenario.new_unit is None:
        return
    ctx.exercised()
    tree = _tree(ctx.world)
    problem = unit_problem(tree, scenario.new_unit)
    if problem is not None:
        raise GuaranteeViolation(f"the seal returned, but {problem}")
    if unit_files(tree, scenario.new_unit) != scenario.new_files:
        raise GuaranteeViolation(f"{scenario.new_unit} does not hold the sealed content")
    left = [u for u in scenario.retired if any(p.startswith(u + "/") for p in tree)]
    if left:
        raise GuaranteeViolation(f"the seal returned, but the replaced {left} remain")


def replaced_unit_retired_only_after_commit(ctx: CheckContext) -> None:
    """US-RETIRE-AFTER-COMMIT: no operation touches a replaced unit before the fsync that
    made the new unit's commit manifest durable."""
    scenario = scenario_of(ctx)
    if scenario.new_unit is None or not scenario.retired:
        return
    manifest = f"{UNITS_ROOT}/{scenario.new_unit}/{MANIFEST}"
    unit_dir = f"{UNITS_ROOT}/{scenario.new_unit}"
    committed_at: int | None = None
    for record in ctx.io_log:
        if committed_at is None and manifest in touched_paths(record):
            committed_at = -1  # created; durable at the next fsync of the unit directory
        elif committed_at == -1 and record.op == "fsync_dir" and record.target == unit_dir:
            committed_at = record.index
        paths = touched_paths(record)
        retired = [
            u for u in scenario.retired if any(p.startswith(f"{UNITS_ROOT}/{u}") for p in paths)
        ]
        if not retired:
            continue
        ctx.exercised()
        if committed_at is None or committed_at < 0:
            raise GuaranteeViolation(
                f"io#{record.index} {record.op} {record.target} touches the replaced "
                f"{retired[0]} before the new commit {scenario.new_unit} was durable"
            )


def committed_units_never_rewritten(ctx: CheckContext) -> None:
    """US-NEVER-REWRITTEN: every unit committed before the run that the run does not retire
    is byte-identical after any crash and after recovery."""
    scenario = scenario_of(ctx)
    before = _tree(ctx.before)
    after = _tree(ctx.world)
    for unit in sorted(_committed(before) - set(scenario.retired)):
        ctx.exercised()
        old = {p: d for p, d in before.items() if p.startswith(unit + "/")}
        new = {p: d for p, d in after.items() if p.startswith(unit + "/")}
        if old != new:
            changed = sorted(set(old) ^ set(new)) or [p for p in old if old[p] != new.get(p)]
            raise GuaranteeViolation(f"committed {unit} changed: {changed[:4]}")


def refused_seal_touches_nothing(ctx: CheckContext) -> None:
    """US-REFUSED: a seal over a committed unit performs no store operation and fails with
    UnitCommittedError, in the run and in the retry."""
    scenario = scenario_of(ctx)
    if scenario.kind != "refused":
        return
    ctx.exercised()
    if ctx.io_log:
        first = ctx.io_log[0]
        raise GuaranteeViolation(f"the refused seal performed io#{first.index} {first.op}")
    if ctx.acknowledged:
        raise GuaranteeViolation("the seal over a committed unit returned successfully")
    if ctx.phase == "recovered":
        outcome = recovery_of(ctx).outcome
        if type(outcome).__name__ != "UnitCommittedError":
            raise GuaranteeViolation(f"the retried seal ended with {outcome!r}")


def retry_commits_the_new_unit(ctx: CheckContext) -> None:
    """US-RETRY-COMPLETES: after recovery (the reader, then the retry) the newest unit is
    committed with the new content and the replaced units are gone."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    if scenario.new_unit is None:
        return
    ctx.exercised()
    tree = _tree(ctx.world)
    unit = recovery.retried
    if unit is None or unit_problem(tree, unit) is not None:
        raise GuaranteeViolation(f"the retry did not commit a unit: {recovery.retried!r}")
    if unit_files(tree, unit) != scenario.new_files:
        raise GuaranteeViolation(f"the retried {unit} does not hold the new content")
    others = sorted(u for u in _units(tree) if u != unit and u.startswith(SLOT + "/"))
    if scenario.kind == "slot" and others:
        raise GuaranteeViolation(f"after the retry older generations remain: {others}")


# ----------------------------------------------------------------------------- unit_prune
def no_half_deleted_unit_looks_committed(ctx: CheckContext) -> None:
    """UP-NEVER-HALF: the pruned unit is committed and intact, or holds no commit manifest,
    or is gone: never a manifest naming a missing or changed file."""
    scenario = scenario_of(ctx)
    tree = _tree(ctx.world)
    for unit in scenario.retired:
        if f"{unit}/{MANIFEST}" not in tree:
            continue
        ctx.exercised()
        problem = unit_problem(tree, unit)
        if problem is not None:
            raise GuaranteeViolation(f"a half-deleted unit still looks committed: {problem}")


def acknowledged_prune_is_durable(ctx: CheckContext) -> None:
    """UP-DURABLE-ON-RETURN: once the prune returned, nothing of the unit is left."""
    scenario = scenario_of(ctx)
    if not ctx.acknowledged or scenario.kind != "prune":
        return
    ctx.exercised()
    tree = _tree(ctx.world)
    names = ctx.world.fs.listdir(UNITS_ROOT) if ctx.world.fs.stat(UNITS_ROOT) else []
    left = [u for u in scenario.retired if u in names or any(p.startswith(u + "/") for p in tree)]
    if left:
        raise GuaranteeViolation(f"the prune returned, but {left} remain")


def rerun_prune_removes_the_unit(ctx: CheckContext) -> None:
    """UP-RERUN: after any crash, the rerun prune leaves nothing of the unit and the reader
    adopts the other committed unit."""
    scenario = scenario_of(ctx)
    recovery = recovery_of(ctx)
    ctx.exercised()
    tree = _tree(ctx.world)
    # Files only: after a failed fsync of the parent directory (lost for good: DESIGN.md
    # section 4) a power loss may bring the emptied directory's name back; it holds nothing.
    left = [u for u in scenario.retired if any(p.startswith(u + "/") for p in tree)]
    if left:
        raise GuaranteeViolation(f"after the rerun prune files of {left} remain")
    if recovery.adopted is None:
        raise GuaranteeViolation("the reader adopted nothing although a committed unit remains")
