"""The direct object-store root as a resume source: the store plus the plan the ``resume``
machine (``machines/resume.toml``) runs over when ``checkpoint_store.backend=object_store``
(the contract is :class:`statecraft.checkpoint.resume.source.CheckpointSource`).

- candidates (``resume=auto``): the iteration ``latest_checkpoint.txt`` names (none: a fresh
  start); a direct root never falls back to an older iteration on its own;
- verification: :func:`~statecraft.checkpoint.direct.reading.read_direct_checkpoint` (the
  manifest, every object it names HEADed, the control files' digests);
- a fresh start is refused when latest names an iteration that did not verify: the refusal is
  that iteration's own error (a damaged checkpoint is named, never trained over);
- components: the DCP shards read in place on every rank through this rank's root
  (:func:`~statecraft.checkpoint.direct.reading.read_dcp_components`).

Example::

    source = DirectResumeSource(root.store, root.uri)              # resume=auto
    source = DirectResumeSource(store, "s3://b/p", iteration=100)  # resume=s3://b/p/iter_...
"""

from __future__ import annotations

from typing import Any

import attrs

from statecraft.checkpoint.direct.latest import read_latest
from statecraft.checkpoint.direct.reading import (
    DirectCheckpoint,
    read_dcp_components,
    read_direct_checkpoint,
)
from statecraft.checkpoint.kernel.layout import iter_dirname
from statecraft.checkpoint.kernel.loading import Components
from statecraft.errors import ResumeError
from statecraft.storage.base import Store

__all__ = ["DirectResumeSource"]


@attrs.define
class DirectResumeSource:
    """One direct root read by the resume machine.

    Attributes:
        store: the root (``s3://<bucket>/<prefix>``), this rank's client.
        root_uri: the root's URI, for messages and the result's ``source``.
        iteration: the explicit iteration (``resume=s3://.../iter_N``); ``None``: latest.
    """

    store: Store
    root_uri: str
    iteration: int | None = None

    @property
    def location(self) -> str:
        return self.root_uri.rstrip("/")

    @property
    def explicit_iteration(self) -> int | None:
        return self.iteration

    def iteration_uri(self, iteration: int) -> str:
        """``s3://<bucket>/<prefix>/iter_N``."""
        return f"{self.location}/{iter_dirname(iteration)}"

    def candidates(self) -> list[int]:
        """The iteration latest names, or none.

        Raises:
            CheckpointCorruptError: latest exists but names no iteration.
        """
        latest = read_latest(self.store)
        return [] if latest is None else [latest]

    def no_candidate_reason(self) -> str:
        return f"fresh start: {self.location} holds no latest_checkpoint.txt"

    def verify(self, iteration: int, *, explicit: bool) -> DirectCheckpoint:
        """Iteration ``iteration`` read and checked (reads only).

        Raises:
            ResumeError / CheckpointCorruptError: see
                :func:`~statecraft.checkpoint.direct.reading.read_direct_checkpoint`.
        """
        return read_direct_checkpoint(
            self.store, iteration, location=self.iteration_uri(iteration), explicit=explicit
        )

    def fresh_refusal(self, failures: dict[int, Exception]) -> Exception | None:
        """The error of the newest iteration latest named that did not verify: a fresh start
        would train over it (``None`` when latest named nothing)."""
        return failures[max(failures)] if failures else None

    def read_components(self, chosen: Any, tracked: Any, *, read_data: bool) -> Components:
        """Every rank: ``chosen``'s components, read in place through this rank's root.

        Raises:
            ResumeError: ``chosen`` is not a direct checkpoint.
            and what :func:`~statecraft.checkpoint.direct.reading.read_dcp_components` raises.
        """
        if not isinstance(chosen, DirectCheckpoint):
            raise ResumeError(f"{chosen!r} is not a direct checkpoint of {self.location}")
        data = chosen.data if read_data else None
        return read_dcp_components(self.store, tracked, chosen, data)
