"""The file at the familiar path: a link to a committed generation, published after its commit.

``ModelCheckpoint.best_model_path``, ``torch.load(path)`` and
``LightningModule.load_from_checkpoint(path)`` open the path Lightning saved to as a file. So
after each generation of a slot (:mod:`statecraft.integrations.lightning_slots`) commits, the
familiar path becomes a relative symlink to that generation's ``checkpoint.pt``:

1. the generation is sealed (payload durable, commit manifest written last);
2. :func:`publish`: a symlink is made under a temporary name inside ``.statecraft/`` and
   renamed over the familiar path (``rename`` is atomic: a reader sees the old link or the
   new one, never none and never a partial one), then the directory is fsynced;
3. only then are the older generations retired (invalidated, then deleted).

So the link never exists before its generation committed, and never names a retired one: a
kill between 1 and 2 leaves the link at the previous committed generation, a kill in 3 leaves
it at the new one. A removal (:func:`unpublish`, retention) unlinks the link durably *first*,
then prunes the slot, so no link ever names an invalidated generation; a kill between the two
leaves a committed slot with no link, which a later save of that name or
``remove_checkpoint`` finishes.
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Mapping

import attrs

from statecraft.checkpoint.units import (
    Payload,
    UnitReport,
    next_generation,
    prune_slot,
    prune_unit,
    seal_unit,
)
from statecraft.checkpoint.units.manifest import MetaValue
from statecraft.integrations.lightning_slots import (
    CHECKPOINT_FILE,
    FRAMEWORK,
    SLOTS_DIR,
    SlotAddress,
    published_unit,
)
from statecraft.storage.filesystem import OsFilesystem
from statecraft.storage.local import LocalStore

__all__ = ["publish", "remove_path", "unpublish", "write_generation"]

log = logging.getLogger("statecraft.lightning")


def publish(address: SlotAddress, unit: str) -> None:
    """Make ``address.familiar`` a symlink to committed generation ``unit``'s
    ``checkpoint.pt`` (atomic rename, directory fsynced). ``unit`` must be committed and
    durable already (the seal returned).

    Raises:
        OSError: the link could not be made or renamed (the familiar path is then as it was:
            the previous link, or nothing).
    """
    fs = OsFilesystem()
    parent = posixpath.dirname(address.familiar)
    temporary = posixpath.join(address.root, f".link-{address.slot}.tmp")
    if os.path.lexists(temporary):
        os.unlink(temporary)  # a killed publish's leftover: never read
    os.symlink(f"{SLOTS_DIR}/{unit}/{CHECKPOINT_FILE}", temporary)
    os.replace(temporary, address.familiar)
    fs.fsync_dir(parent)
    fs.fsync_dir(address.root)
    log.debug("published %s -> %s", address.familiar, unit)


def unpublish(address: SlotAddress) -> bool:
    """Unlink the link statecraft published at ``address.familiar`` durably (unlink, then the
    directory's fsync); ``False`` when no such link is there (nothing touched)."""
    if published_unit(address.familiar) is None:
        return False
    os.unlink(address.familiar)
    OsFilesystem().fsync_dir(posixpath.dirname(address.familiar))
    return True


def write_generation(
    address: SlotAddress,
    payload: Payload,
    *,
    step: int | None,
    meta: Mapping[str, MetaValue],
) -> UnitReport:
    """Seal the next generation of ``address``'s slot in ``.statecraft/`` with ``payload``
    as its ``checkpoint.pt``, :func:`publish` the familiar path's link to it, then retire the
    older generations (and a legacy slot directory at the familiar path, which the link
    replaces, invalidated first) -- in that order (see the module doc).

    Raises:
        as :func:`~statecraft.checkpoint.units.seal_unit` (nothing published, nothing
        retired), or OSError from :func:`publish` (the new generation is committed, the link
        and the older generations are as they were).
    """
    parent = posixpath.dirname(address.familiar)
    linked = attrs.evolve(address, root=posixpath.join(parent, SLOTS_DIR), legacy=False)
    store = linked.store
    unit, older = next_generation(store, linked.slot)
    report = seal_unit(
        store,
        unit,
        framework=FRAMEWORK,
        step=step,
        meta=meta,
        payloads={CHECKPOINT_FILE: payload},
    )
    if address.legacy:
        prune_slot(LocalStore(parent), address.slot)
    publish(linked, unit)
    for retired in older:
        prune_unit(store, retired)
    return attrs.evolve(report, retired=tuple(older))


def remove_path(address: SlotAddress) -> None:
    """Remove the checkpoint at ``address`` (``follow_link=False``): a legacy slot directory
    generation by generation (each invalidated first); a link statecraft published, durably,
    *then* its slot; a ``save_last="link"`` link or a plain file statecraft never wrote, itself
    only (never a link's target). Absent is fine; a rerun finishes an interrupted removal."""
    familiar = address.familiar
    if address.legacy:
        prune_slot(address.store, address.slot)
    elif os.path.lexists(familiar) and published_unit(familiar) is None:
        prune_slot(LocalStore(posixpath.dirname(familiar)), address.slot)
    else:
        unpublish(address)
        if address.exists():
            prune_slot(address.store, address.slot)
