"""The records of the ``resume`` transaction: the live objects it loads into (:class:`Tracked`),
its context (:class:`ResumeContext`, one resume decision and load) and its outcome
(:class:`ResumeResult`). The effects are in :mod:`statecraft.checkpoint.resume.bindings`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import attrs

from statecraft.checkpoint.kernel.artifact_catalog import ArtifactEntry
from statecraft.checkpoint.kernel.catalog import Catalog, PassedOver
from statecraft.checkpoint.kernel.validation_records import ValidationIdentity, ValidationStage
from statecraft.checkpoint.kernel.verify import VerifiedCheckpoint
from statecraft.checkpoint.resume.source import CheckpointSource, SourcedCheckpoint
from statecraft.checkpoint.state import UpdateClocks
from statecraft.parallel.collectives import Collective, SingleProcess
from statecraft.storage.base import Store
from statecraft.storage.filesystem import Filesystem
from statecraft.writers.base import Writer
from statecraft.writers.consolidated import ConsolidatedWriter

__all__ = ["ResumeContext", "ResumeResult", "Tracked"]


@attrs.frozen
class ResumeResult:
    """Where training starts.

    Attributes:
        step: the optimizer step to continue from (0 for a fresh start).
        source: the checkpoint loaded, or ``None`` for a fresh start.
        reason: one line saying why (also logged).
        passed_over: newer candidates that were not adopted, each with its reason.
        rng: ``"restored"``, ``"missing"``, ``"topology_changed"`` or ``"fresh"``.
        data: what happened to the data source: ``"restored"`` (this rank's own saved
            state), ``"topology_changed"`` (saved at another world size: the data source kept
            its fresh state), ``"no_cursor"`` (the source, now or at the save, has no cursor:
            it restarts), ``"geometry_changed"`` (batch size, accumulation, seed or sharding
            changed: it restarts its epoch), ``"missing"`` (no ``data.pt``), ``"untracked"``,
            ``"off"`` (``data.cursor_resume=off``), ``"fresh"`` (no checkpoint).
        notes: warnings about the choice (an unreadable or dangling latest pointer, digests
            not verified); each was also logged.
        loop_state: a copy of the loop state restored into ``Checkpointer.loop_state`` (empty
            for a fresh start).
        validation_stage: the adopted checkpoint's validation stage (``NONE`` for a fresh
            start, a regular checkpoint, or a legacy file); a pending stage means the resumed
            run must finish that checkpoint's validation.
        metrics: the evaluated metrics of a publication-pending or published checkpoint,
            else ``None``.
    """

    step: int
    source: str | None
    reason: str
    passed_over: tuple[PassedOver, ...] = ()
    rng: str = "fresh"
    data: str = "fresh"
    notes: tuple[str, ...] = ()
    loop_state: dict[str, Any] = attrs.field(factory=dict, hash=False)
    validation_stage: ValidationStage = ValidationStage.NONE
    metrics: dict[str, float] | None = attrs.field(default=None, hash=False)

    @property
    def resumed(self) -> bool:
        return self.source is not None


@attrs.define
class Tracked:
    """The live training objects a resume loads into (registered with ``Checkpointer.track``)."""

    model: Any = None
    optimizer: Any = None
    scheduler: Any = None
    data: Any = None
    ema: Any = None  # a maintained EMA (track(ema=...)): saved in model.pt with the model's
    data_identity: Any = None  # a DataIdentity the loop declared (statecraft.checkpoint.data)
    scheduler_identity: Any = None
    clocks: UpdateClocks = attrs.field(factory=UpdateClocks)
    stateful: dict[str, Any] = attrs.field(factory=dict)  # name -> object with state_dict
    loop_state: dict[str, Any] = attrs.field(factory=dict)  # Checkpointer.loop_state
    # the model's moving copies (init_from.roles.ModelCopies; None: no copy tracked) and the
    # modules old.pt / ref.pt hold (a moving old policy, a moving reference)
    copies: Any = None
    old: Any = None
    ref: Any = None


@attrs.define
class ResumeContext:
    """One resume decision and load.

    Attributes:
        mode: ``"auto"``, ``"off"`` or ``"explicit"``.
        store: the adopted attempt's checkpoints root (``None`` when the attempt is new).
        explicit: the explicit path (``mode == "explicit"``).
        tracked: the objects to load into.
        verify_level: ``"digest"`` or ``"size"``.
        cursor_resume: ``data.cursor_resume`` (``auto`` / ``strict`` / ``off``).
        filesystem: what an explicit path is resolved and read through (default: the OS).
        artifacts: the attempt's ``checkpoint_artifacts`` root, ``None`` when it has none
            (:func:`~statecraft.checkpoint.kernel.artifact_catalog.open_artifacts`); its artifacts
            constrain what may be resumed (:mod:`.resume_rules`).
        validation_identity: this run's validation identity, checked against the chosen
            checkpoint's before anything loads; ``None``: not checked.
        source: where the checkpoints are when they are not a local attempt's tree (the direct
            object-store root: :mod:`statecraft.checkpoint.resume.source`); ``store`` is then
            ``None``, and ``chosen`` is the source's :class:`SourcedCheckpoint`.
        candidate_errors: why each candidate failed verification (rank 0 only; the source's
            :meth:`~CheckpointSource.fresh_refusal` reads them).
        catalog: the attempt's catalog (rank 0 only; set by ``list_candidates``).
        newest_artifact: the attempt's newest artifact with a manifest (set when the
            artifacts are scanned).
        chosen_stage / chosen_metrics: the chosen checkpoint's validation stage and metrics.
        before_load: rank 0's wait, called by ``require_admissible`` before anything loads:
            the facade's writer lease record, published on a thread while the candidates
            verify, is durable when it returns (it raises the publication's error, and
            nothing is loaded then). ``None``: nothing to wait for.
    """

    #: the fields a coordinator effect sets on rank 0 that every rank needs afterwards
    coordinated: ClassVar[tuple[str, ...]] = (
        "candidates",
        "passed_over",
        "chosen",
        "fresh_reason",
        "notes",
        "newest_artifact",
        "chosen_stage",
        "chosen_metrics",
    )

    mode: str
    tracked: Tracked
    store: Store | None = None
    explicit: str | None = None
    verify_level: str = "digest"
    cursor_resume: str = "auto"
    collective: Collective = attrs.field(factory=SingleProcess)
    writer: Writer = attrs.field(factory=ConsolidatedWriter)
    filesystem: Filesystem | None = None
    artifacts: Store | None = None
    validation_identity: ValidationIdentity | None = None
    source: CheckpointSource | None = None
    candidate_errors: dict[int, Exception] = attrs.field(factory=dict)
    catalog: Catalog | None = None
    artifacts_scanned: bool = False
    newest_artifact: ArtifactEntry | None = None
    chosen_stage: ValidationStage = ValidationStage.NONE
    chosen_metrics: dict[str, float] | None = None
    candidates: list[int] = attrs.field(factory=list)
    passed_over: list[PassedOver] = attrs.field(factory=list)
    chosen: VerifiedCheckpoint | SourcedCheckpoint | None = None
    result: ResumeResult | None = None
    fresh_reason: str = ""
    notes: list[str] = attrs.field(factory=list)
    before_load: Callable[[], None] | None = None
