"""The rule that a committed manifest lists every file its checkpoint's plan requires.

A manifest records the plan's format and components and every file the save wrote. For each
component the plan (:data:`~statecraft.checkpoint.kernel.plan.PLANS`) says which entries hold
it; a required entry (``model.pt``, ``optim.pt``, ``trainer.pt``) is checked against the
manifest by :func:`~statecraft.checkpoint.kernel.verify.plan_problems`. An optional entry
(``data.pt``: ``training_state``'s data cursor) belongs to the plan exactly when the save had
its object (a data source tracked), and the save leaves its evidence: the entry itself, written
before the manifest into an iteration directory the save cleared first (``prepare_iteration``:
nothing older survives in it). So a committed iteration that holds an entry of its plan's
components which its manifest does not record has a manifest that omits a file the plan
requires: it is not a commit. Resuming it would restart the data cursor (a silent non-exact
resume, ``data="missing"``) although the cursor was saved.

:func:`omitted_entries` is the pure rule over one directory listing;
:func:`omitted_problem` lists the directory and words the verdict. Verification
(:func:`~statecraft.checkpoint.kernel.verify.verify_checkpoint`, so ``resume=auto`` passes over
such an iteration with this reason, an explicit ``resume=`` is refused and ``statecraft
inspect`` flags it) and the catalog's cheap reading (retention never counts it) call it.
Writer temporaries (``*.tmp*``, never part of a commit) and markers are not plan entries and
are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable

from statecraft.checkpoint.kernel.manifest import Manifest
from statecraft.checkpoint.kernel.plan import PLANS, entry_of
from statecraft.storage.base import Store

__all__ = ["omitted_entries", "omitted_problem"]


def omitted_entries(manifest: Manifest, names: Iterable[str]) -> list[str]:
    """The entries of ``manifest``'s plan, for its recorded components, that the iteration
    directory holds (``names``: its listing) but the manifest does not record, sorted.

    A manifest of an unknown format has no plan here (verification refuses it by its format).
    """
    table = PLANS.get(manifest.format)
    if table is None:
        return []
    recorded = {entry_of(n) for n in manifest.files}
    planned = {e.name for e in table if e.component in manifest.components}
    return sorted({n for n in names if n in planned and n not in recorded})


def omitted_problem(
    store: Store, iter_dir: str, manifest: Manifest, *, names: Iterable[str] | None = None
) -> str | None:
    """Why ``iter_dir``'s manifest is not a commit because it omits planned entries the
    directory holds, or ``None``. ``names``: the directory's listing when the caller has it
    (otherwise it is listed: one ``list`` of the store)."""
    omitted = omitted_entries(manifest, store.list(iter_dir) if names is None else names)
    if not omitted:
        return None
    return (
        f"it omits {omitted}, which {'is' if len(omitted) == 1 else 'are'} on disk "
        f"in {iter_dir} and part of the checkpoint's plan for its components "
        f"{list(manifest.components)} (a committed manifest lists every file the plan "
        "requires; this one was edited or truncated, so it is not a commit)"
    )
