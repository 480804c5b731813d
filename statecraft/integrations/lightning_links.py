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

from statecraft.integrations.lightning_slots import (
    CHECKPOINT_FILE,
    SLOTS_DIR,
    SlotAddress,
    published_unit,
)
from statecraft.storage.filesystem import OsFilesystem

__all__ = ["publish", "unpublish"]

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
