"""Reading multi-role boundaries: judge each ``iter_N`` and pick the newest complete one.

A boundary is **committed** only when its ``_SUCCESS`` decodes, names the iteration of its
directory, and every role it names holds a role unit whose manifest decodes, names that role
and iteration, and whose files verify (size and digest; no file more or less); and the
counters agree (:func:`counter_problems`). Anything else is **partial** (no marker) or
**damaged**, passed over with its reason. Reads only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from statecraft.checkpoint.kernel.catalog_entries import PassedOver
from statecraft.checkpoint.roles.layout import (
    MARKER_NAME,
    ROLE_MANIFEST_NAME,
    boundary_dir,
    parse_iter_dirname,
    role_dir,
)
from statecraft.checkpoint.roles.records import (
    BoundaryMarker,
    RoleManifest,
    decode_marker,
    decode_role_manifest,
)
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.base import Store
from statecraft.storage.digest import file_digest
from statecraft.storage.local import is_temporary_name

__all__ = [
    "BoundaryVerdict",
    "CounterCheck",
    "boundary_iterations",
    "counter_problems",
    "judge_boundary",
    "pick_boundary",
    "settle_boundary",
]

#: judges a marker's counters against the role units' (``[]``: they agree)
CounterCheck = Callable[[BoundaryMarker, Mapping[str, RoleManifest]], list[str]]


@attrs.frozen
class BoundaryVerdict:
    """What one ``iter_N`` is.

    Attributes:
        state: ``committed``, ``partial`` (no marker) or ``damaged``.
        reason: why it is not committed (empty when it is).
        marker / manifests: the decoded records (committed boundaries only).
    """

    iteration: int
    state: str
    reason: str = ""
    marker: BoundaryMarker | None = None
    manifests: Mapping[str, RoleManifest] = attrs.field(factory=dict)

    @property
    def name(self) -> str:
        return boundary_dir(self.iteration)


def counter_problems(marker: BoundaryMarker, manifests: Mapping[str, RoleManifest]) -> list[str]:
    """Every role against its own recorded counter; a marker written without counters by the
    older rule (every role's committed counter agrees)."""
    if marker.counters is None:
        counters = {role: manifests[role].optimizer_step for role in marker.roles}
        if len(set(counters.values())) > 1:
            return [f"{MARKER_NAME} records no per-role counters and the roles disagree {counters}"]
        return []
    return [
        f"{MARKER_NAME} records {role} counter {marker.counters[role]}, the {role} unit "
        f"committed {manifests[role].optimizer_step}"
        for role in marker.roles
        if marker.counters[role] != manifests[role].optimizer_step
    ]


def _role_problem(store: Store, iteration: int, role: str) -> tuple[RoleManifest | None, str]:
    unit = role_dir(iteration, role)
    where = f"{store.describe()}/{unit}"
    try:
        manifest = decode_role_manifest(
            store.read_bytes(f"{unit}/{ROLE_MANIFEST_NAME}"), source=where
        )
    except FileNotFoundError:
        return None, f"role {role!r} is not committed (no {ROLE_MANIFEST_NAME})"
    except CheckpointCorruptError as exc:
        return None, f"role {role!r}: {exc.fields.get('problem', exc)}"
    if manifest.role != role or manifest.iteration != iteration:
        return None, (
            f"role {role!r}: its manifest names role {manifest.role!r} of iteration "
            f"{manifest.iteration}"
        )
    present = sorted(
        n for n in store.list(unit) if n != ROLE_MANIFEST_NAME and not is_temporary_name(n)
    )
    if present != sorted(manifest.files):
        return None, f"role {role!r} holds {present}, its manifest names {sorted(manifest.files)}"
    for name, entry in sorted(manifest.files.items()):
        stat = store.stat(f"{unit}/{name}")
        if stat is None or stat.size != entry.size:
            return None, f"role {role!r}: {name} does not have the recorded size {entry.size}"
        if file_digest(store, f"{unit}/{name}", entry.digest.algorithm) != entry.digest:
            return None, f"role {role!r}: {name} does not match its recorded digest"
    return manifest, ""


def judge_boundary(
    store: Store, iteration: int, *, counter_check: CounterCheck = counter_problems
) -> BoundaryVerdict:
    """The verdict on ``iter_<iteration>`` of the roles store ``store`` (see the module
    docstring). Never raises for what it finds on disk."""
    here = boundary_dir(iteration)
    stat = store.stat(here)
    if stat is None or not stat.is_dir:
        return BoundaryVerdict(iteration, "damaged", f"{here} is not a directory")
    entries = [e for e in store.list(here) if not is_temporary_name(e)]
    if MARKER_NAME not in entries:
        committed = [
            e for e in entries if store.stat(f"{here}/{e}/{ROLE_MANIFEST_NAME}") is not None
        ]
        return BoundaryVerdict(
            iteration, "partial",
            f"no {MARKER_NAME} marker (roles committed: {committed or 'none'}): a boundary "
            "whose save did not finish",
        )  # fmt: skip
    try:
        marker = decode_marker(
            store.read_bytes(f"{here}/{MARKER_NAME}"),
            source=f"{store.describe()}/{here}/{MARKER_NAME}",
        )
    except CheckpointCorruptError as exc:
        return BoundaryVerdict(iteration, "damaged", str(exc.fields.get("problem", exc)))
    if marker.iteration != iteration:
        return BoundaryVerdict(
            iteration, "damaged", f"{MARKER_NAME} names iteration {marker.iteration}"
        )
    strangers = sorted(set(entries) - set(marker.roles) - {MARKER_NAME})
    if strangers:
        return BoundaryVerdict(
            iteration, "damaged", f"it holds {strangers}, which {MARKER_NAME} does not name"
        )
    manifests: dict[str, RoleManifest] = {}
    for role in marker.roles:
        manifest, problem = _role_problem(store, iteration, role)
        if manifest is None:
            return BoundaryVerdict(iteration, "damaged", problem)
        manifests[role] = manifest
    problems = counter_check(marker, manifests)
    if problems:
        return BoundaryVerdict(iteration, "damaged", "; ".join(problems))
    return BoundaryVerdict(iteration, "committed", "", marker, manifests)


def boundary_iterations(store: Store) -> list[int]:
    """The iterations of the roles store's ``iter_*`` directories, newest first."""
    found = (parse_iter_dirname(name) for name in store.list(""))
    return sorted((i for i in found if i is not None), reverse=True)


def pick_boundary(
    store: Store, *, counter_check: CounterCheck = counter_problems
) -> tuple[BoundaryVerdict | None, tuple[PassedOver, ...]]:
    """The newest committed boundary (``None``: none) and every newer one passed over, newest
    first, each with its reason."""
    passed: list[PassedOver] = []
    for iteration in boundary_iterations(store):
        verdict = judge_boundary(store, iteration, counter_check=counter_check)
        if verdict.state == "committed":
            return verdict, tuple(passed)
        passed.append(PassedOver(verdict.name, f"{verdict.state}: {verdict.reason}"))
    return None, tuple(passed)


def settle_boundary(store: Store, verdict: BoundaryVerdict) -> None:
    """Make an adopted boundary durable before anything relies on it (a killed save may have
    left its last publications in the page cache): every role unit, the boundary directory
    and the store root, fsynced (no byte or name changes)."""
    for role in verdict.manifests:
        store.make_durable(role_dir(verdict.iteration, role))
    store.make_durable(verdict.name)
    store.make_durable("")
