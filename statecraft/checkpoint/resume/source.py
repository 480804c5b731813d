"""Where the ``resume`` machine finds its checkpoints when they are not the adopted attempt's
local tree: a :class:`CheckpointSource` (a store plus a plan: which iterations are candidates,
how one is verified, how its components are read), with the machine deciding the order.

The direct object-store primary
(:class:`~statecraft.checkpoint.direct.resume_source.DirectResumeSource`) is one: the candidate
is the iteration the root's ``latest_checkpoint.txt`` names, verification reads its manifest,
HEADs every object it names and checks the control files' digests, and the DCP components are
read in place by ranged GETs. The machine (``machines/resume.toml``) runs the same
transitions over it as over a local tree: verify before anything loads, refuse a fresh start
that would hide a checkpoint the source names but cannot prove, load all or nothing.

Contract of a source (every method may raise; what it raises ends the resume, named):

- :meth:`CheckpointSource.candidates` (rank 0): the iterations ``resume=auto`` tries, newest
  first; an empty list is a fresh start with :meth:`~CheckpointSource.no_candidate_reason`.
- :meth:`CheckpointSource.verify` (rank 0, reads only): a :class:`SourcedCheckpoint`, or the
  error naming what is wrong; ``explicit`` marks an iteration the user named.
- :meth:`CheckpointSource.fresh_refusal` (rank 0): after every candidate failed, the error that
  forbids a fresh start (``None``: starting fresh is allowed).
- :meth:`CheckpointSource.read_components` (every rank): the components of the verified
  checkpoint, read into scratch targets; nothing live changes.

A :class:`SourcedCheckpoint` crosses ranks (rank 0 verifies it, every rank loads it), so it
must pickle without its store: every rank reads through its own source.
"""

from __future__ import annotations

from typing import Any, Protocol

from statecraft.checkpoint.kernel.loading import Components
from statecraft.checkpoint.state import TrainerState

__all__ = ["CheckpointSource", "SourcedCheckpoint"]


class SourcedCheckpoint(Protocol):
    """A checkpoint a :class:`CheckpointSource` verified."""

    @property
    def iteration(self) -> int: ...

    @property
    def location(self) -> str:
        """Where it is, for messages and :attr:`ResumeResult.source`
        (``s3://bucket/prefix/iter_N``)."""

    @property
    def trainer(self) -> TrainerState | None: ...

    @property
    def has_data(self) -> bool:
        """It holds the data source's state (``data.pt``)."""


class CheckpointSource(Protocol):
    """A store plus a plan the ``resume`` machine runs over (see the module docstring)."""

    @property
    def location(self) -> str:
        """The source's root, for messages (``s3://bucket/prefix``)."""

    @property
    def explicit_iteration(self) -> int | None:
        """The iteration ``resume=<path>`` names (``None`` under ``resume=auto``)."""

    def candidates(self) -> list[int]: ...

    def no_candidate_reason(self) -> str: ...

    def verify(self, iteration: int, *, explicit: bool) -> SourcedCheckpoint: ...

    def fresh_refusal(self, failures: dict[int, Exception]) -> Exception | None: ...

    def read_components(
        self, chosen: SourcedCheckpoint, tracked: Any, *, read_data: bool
    ) -> Components: ...
