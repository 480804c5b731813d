"""The direct object-store primary's retention (``checkpoint_store.keep_last``): after a save,
the committed iterations of the root beyond the newest N are removed, under the writer lease.

The rules are remote retention's
(:mod:`~statecraft.checkpoint.archive.remote_retention`): the newest committed iteration and
the one ``latest_checkpoint.txt`` names are never removed; each removal runs the
``archive_prune`` machine (the lease is checked, then the commit record
``iter_N/.posttrain-manifest.json`` is deleted, then the shards and control files), so a crash
leaves the iteration committed and whole or uncommitted (partial: never resumed, collected by
the next save's pass), never a torn committed one. A writer whose lease was taken over deletes
nothing (``WriterLeaseError``).

::

    retain_direct(root, lease=lease)      # after save_direct_checkpoint, rank 0 only
"""

from __future__ import annotations

import logging
from typing import Any

from statecraft.checkpoint.archive.remote_retention import RemotePruneReport, prune_remote
from statecraft.checkpoint.direct.latest import read_latest
from statecraft.checkpoint.direct.root import DirectRoot

__all__ = ["retain_direct"]

log = logging.getLogger("statecraft.direct")


def retain_direct(root: DirectRoot, *, lease: Any) -> RemotePruneReport | None:
    """Apply ``root.keep_last`` (``0``: nothing, ``None`` returned).

    Args:
        lease: the writer lease (``ObjectStoreLease``), checked before each commit record is
            deleted; ``None``: tools and tests only.

    Raises:
        WriterLeaseError: the lease was taken over; nothing more is deleted.
        ObjectRequestError / CheckpointCorruptError: a request failed, or latest is garbage
            (nothing is deleted then); an iteration being removed is whole or uncommitted.
    """
    if root.keep_last < 1:
        return None
    latest = read_latest(root.store)
    protected = {latest: "named by latest"} if latest is not None else {}
    fence = lease.check if lease is not None else None
    return prune_remote(
        root.bucket, root.prefix, root.keep_last, protected=protected, fence=fence
    )
