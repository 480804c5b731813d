"""The checks named by ``specs/roles_boundary.toml``.

They judge with an oracle of their own: the raw simulated-disk bytes, the ``_SUCCESS`` and
role manifests' JSON parsed here and every file hashed here
(:func:`~statecraft.proofs.oracle.digest_of`), never the production reader they judge. Each
raises :class:`~statecraft.proofs.GuaranteeViolation` with what it found, and calls
``ctx.exercised()`` when it asserted something in the state it was given.
"""

from __future__ import annotations

from statecraft.checkpoint.roles.layout import MARKER_NAME, ROLE_MANIFEST_NAME
from statecraft.proofs.oracle import digest_of, json_or_none, recorded_digest
from statecraft.proofs.roles.scenarios import (
    ROLES,
    ROLES_ROOT,
    RolesRecovery,
    RolesScenario,
    committed_role_files,
    role_bytes,
)
from statecraft.proofs.scenario import CheckContext, GuaranteeViolation
from statecraft.storage.local import is_temporary_name
from statecraft.storage.sim import SimWorld

__all__ = [
    "acknowledged_boundary_is_durable",
    "adopted_boundary_is_complete",
    "adopted_roles_from_one_boundary",
    "committed_roles_never_rewritten",
    "marker_only_over_committed_roles",
    "retry_completes_or_refuses",
]


def _tree(world: SimWorld) -> dict[str, bytes]:
    return world.fs.tree(ROLES_ROOT)


def _recovery(ctx: CheckContext) -> RolesRecovery:
    if not isinstance(ctx.recovery, RolesRecovery):
        raise GuaranteeViolation(f"recovery did not complete: {ctx.recovery!r}")
    return ctx.recovery


def role_unit_problem(tree: dict[str, bytes], unit: str) -> tuple[int | None, str | None]:
    """``(counter, None)`` for a committed, intact role unit, else ``(None, why)``."""
    raw = json_or_none(tree.get(f"{unit}/{ROLE_MANIFEST_NAME}"))
    if not isinstance(raw, dict):
        return None, f"{unit} has no readable role manifest"
    try:
        entries = {n: (int(e["size"]), recorded_digest(e)) for n, e in raw["files"].items()}
        counter = int(raw["optimizer_step"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return None, f"{unit} role manifest unreadable: {exc!r}"
    prefix = unit + "/"
    present = {
        p[len(prefix) :] for p in tree
        if p.startswith(prefix) and not p.endswith("/" + ROLE_MANIFEST_NAME)
        and not is_temporary_name(p.rsplit("/", 1)[-1])
    }  # fmt: skip
    if present != set(entries):
        return None, f"{unit} holds {sorted(present)}, its manifest names {sorted(entries)}"
    for name, (size, (algorithm, value)) in sorted(entries.items()):
        data = tree[f"{unit}/{name}"]
        if len(data) != size or digest_of(data, algorithm) != value:
            return None, f"{unit}/{name} ({len(data)} bytes) does not match its manifest"
    return counter, None


def boundary_problem(tree: dict[str, bytes], iteration: int) -> str | None:
    """Why boundary ``iteration`` is not complete: its marker, every role it names committed
    and intact, each counter the marker records equal to the role's (``None``: complete)."""
    here = f"iter_{iteration:09d}"
    marker = json_or_none(tree.get(f"{here}/{MARKER_NAME}"))
    if not isinstance(marker, dict) or not isinstance(marker.get("roles"), list):
        return f"{here} has no readable {MARKER_NAME}"
    counters = marker.get("counters")
    for role in marker["roles"]:
        counter, problem = role_unit_problem(tree, f"{here}/{role}")
        if problem is not None:
            return f"{MARKER_NAME} of {here} names {role}, but {problem}"
        if isinstance(counters, dict) and counters.get(role) != counter:
            recorded = counters.get(role)
            return f"{MARKER_NAME} of {here} records {role} counter {recorded}, the unit {counter}"
    return None


def _boundaries(tree: dict[str, bytes]) -> list[int]:
    return sorted(
        {int(p[5:14]) for p in tree if p.startswith("iter_") and p.endswith("/" + MARKER_NAME)}
    )


def marker_only_over_committed_roles(ctx: CheckContext) -> None:
    """RB-MARKER-LAST: whenever a ``_SUCCESS`` exists, every role it names is a committed,
    intact role unit (the marker is created only after every role is durable)."""
    tree = _tree(ctx.world)
    for iteration in _boundaries(tree):
        if ctx.scenario.kind == "doctored" and iteration == 3:
            continue  # its counters are doctored on purpose; its roles are intact
        ctx.exercised()
        problem = boundary_problem(tree, iteration)
        if problem is not None:
            raise GuaranteeViolation(f"a marker promises roles that are not committed: {problem}")


def adopted_boundary_is_complete(ctx: CheckContext) -> None:
    """RB-ADOPT-COMPLETE: the reader adopts a boundary only with its marker and every role
    committed, each role's counter the one the marker records; and never nothing (boundary 1
    is committed)."""
    recovery = _recovery(ctx)
    ctx.exercised()
    if recovery.adopted is None:
        raise GuaranteeViolation("the reader adopted nothing although boundary 1 is committed")
    tree = _before_retry(ctx, recovery) if recovery.retried else _tree(ctx.world)
    for iteration in sorted(set(recovery.adopted.values())):
        problem = boundary_problem(tree, iteration)
        if problem is not None:
            raise GuaranteeViolation(f"the reader adopted iter {iteration}: {problem}")


def _before_retry(ctx: CheckContext, recovery: RolesRecovery) -> dict[str, bytes]:
    """The tree the reader saw: the recovered world's, with the committed role units as they
    were before the retry (a retry only adds)."""
    return {**_tree(ctx.world), **recovery.committed_before}


def adopted_roles_from_one_boundary(ctx: CheckContext) -> None:
    """RB-NO-MIX: every role is loaded from the same boundary, holding that boundary's bytes
    for each role (never one role of boundary 2 with another of boundary 1)."""
    recovery = _recovery(ctx)
    if recovery.adopted is None:
        return
    ctx.exercised()
    sources = set(recovery.adopted.values())
    if len(sources) != 1 or set(recovery.adopted) != set(ROLES):
        raise GuaranteeViolation(
            f"the roles were loaded from a mix of boundaries: {recovery.adopted}"
        )
    (iteration,) = sources
    for role in ROLES:
        expected = role_bytes(iteration, role)
        if recovery.adopted_files.get(role) != expected:
            raise GuaranteeViolation(f"{role} loaded from iter {iteration} holds other bytes")


def committed_roles_never_rewritten(ctx: CheckContext) -> None:
    """RB-NEVER-REWRITTEN: every committed role unit (the setup's, and the ones a crashed save
    committed) is byte-identical after the crash and after the retry."""
    old = committed_role_files(_tree(ctx.before))
    now = _tree(ctx.world)
    units = dict(old)
    if ctx.phase == "recovered":
        units.update(_recovery(ctx).committed_before)
    ctx.exercised()
    changed = sorted(p for p, data in units.items() if now.get(p) != data)
    if changed:
        raise GuaranteeViolation(f"committed role units were rewritten or removed: {changed[:4]}")


def retry_completes_or_refuses(ctx: CheckContext) -> None:
    """RB-RETRY: after the restart, boundary 2 is complete (the bit-exact replay always
    completes it), or the retry refused with a statecraft error and left no ``_SUCCESS``."""
    scenario: RolesScenario = ctx.scenario
    recovery = _recovery(ctx)
    if scenario.kind == "doctored":
        return
    ctx.exercised()
    tree = _tree(ctx.world)
    problem = boundary_problem(tree, 2)
    if problem is None:
        return
    if scenario.kind == "next" or recovery.outcome is None:
        raise GuaranteeViolation(
            f"the retry did not complete boundary 2: {problem}; outcome {recovery.outcome!r}"
        )
    if f"iter_000000002/{MARKER_NAME}" in tree:
        raise GuaranteeViolation(f"the retry refused but left a {MARKER_NAME}: {problem}")


def acknowledged_boundary_is_durable(ctx: CheckContext) -> None:
    """RB-DURABLE-ON-RETURN: once the save returned, boundary 2 is complete with its bytes
    under process kill and power loss."""
    if not ctx.acknowledged:
        return
    ctx.exercised()
    tree = _tree(ctx.world)
    problem = boundary_problem(tree, 2)
    if problem is not None:
        raise GuaranteeViolation(f"the acknowledged boundary 2 is not complete: {problem}")
    for role in ROLES:
        for name, data in role_bytes(2, role).items():
            if tree.get(f"iter_000000002/{role}/{name}") != data:
                raise GuaranteeViolation(f"iter_000000002/{role}/{name} lost its bytes")
