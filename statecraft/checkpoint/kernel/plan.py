"""The plan model: the one description of what a checkpoint holds.

A checkpoint is a set of **logical components** (``model``, ``optimizer``, ``training_state``)
stored as **physical entries** (a file or a directory under ``iter_<9 digits>/``). Every part
of the library that needs the file list iterates :data:`CHECKPOINT_PLAN` instead of spelling
it: the save effects (by phase), the facade's payload capture, resume's loading, verification,
``statecraft inspect`` and the demo.

::

    component        entry        phase    required  captures / loads into   load
    model            model.pt     bulk     yes       tracked.model           mmap
    optimizer        optim.pt     bulk     yes       tracked.optimizer       memory
    training_state   old.pt       bulk     no        tracked.old             mmap
    training_state   ref.pt       bulk     no        tracked.ref             mmap
    training_state   trainer.pt   control  yes       TrainerState (clocks)   memory
    training_state   data.pt      control  no        tracked.data (per rank) memory

``old.pt`` / ``ref.pt`` hold a moving old policy / moving reference
(:mod:`statecraft.checkpoint.init_from.moving`); which of them a save writes is
``tracked.copies.saved_entries()`` (:func:`saved_copies`: ``old.pt`` is omitted at a
refresh-aligned checkpoint).

The DCP format (``checkpoint_format=dcp``, :data:`DCP_PLAN`) stores the bulk components as
directories of per-rank shards plus ``.metadata``, written by every rank::

    component        entry        phase    required  captures / loads into   load
    model            model/       bulk     yes       tracked.model (DCP)     ranged reads
    optimizer        optim/       bulk     yes       tracked.optimizer (DCP) ranged reads
    training_state   trainer.pt   control  yes       TrainerState (clocks)   memory
    training_state   data.pt      control  no        tracked.data (per rank) memory

A manifest records every file under ``iter_N/`` (``model/__0_0.distcp``, ``model/.metadata``);
:func:`entry_of` maps such a path to its entry (``model``). :func:`plan_for` gives the table of
a manifest's ``format``. The DCP table has no ``old`` / ``ref`` directories yet (the facade
refuses moving copies under ``checkpoint_format=dcp``).

Why only the model is mapped: its state is *copied* into live tensors by ``load_state_dict``;
an optimizer keeps the loaded tensors as its state, and a mapping would pin the checkpoint file
(and its disk space) for the rest of the run.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from functools import partial

# Any: the tracked objects and the payloads the plan's producers return (torch state dicts)
# have no static type; the writer serializes whatever a producer returns.
from typing import Any

import attrs

from statecraft.checkpoint.kernel.ema_entries import model_payload
from statecraft.checkpoint.kernel.manifest import SavePlan
from statecraft.checkpoint.state.safe_values import require_safe
from statecraft.errors import CheckpointError

__all__ = [
    "CHECKPOINT_PLAN",
    "COPY_ENTRIES",
    "DCP_PLAN",
    "FULL_COMPONENTS",
    "INCREMENTAL_PLAN",
    "PLANS",
    "TRAINER_ENTRY",
    "CheckpointPlan",
    "Phase",
    "PlanEntry",
    "entry_of",
    "full_save_plan",
    "plan_for",
    "saved_copies",
]

FULL_COMPONENTS: tuple[str, ...] = ("model", "optimizer", "training_state")
TRAINER_ENTRY = "trainer.pt"  # the control state every verification parses


class Phase(enum.IntEnum):
    """When an entry is written: every bulk entry is durable before any control entry."""

    BULK = 1
    CONTROL = 2


@attrs.frozen
class PlanEntry:
    """One physical entry of a checkpoint.

    Attributes:
        name: the file or directory name under ``iter_<9 digits>/`` (``model.pt``).
        component: the logical component it belongs to (one of :data:`FULL_COMPONENTS`).
        phase: when the save writes it (:class:`Phase`).
        required: every full checkpoint holds it; an optional entry is present only when its
            tracked object is (``data.pt`` with a data source).
        tracked: the attribute of the tracked objects (``Tracked``) it captures from and loads
            into, or ``None`` for the trainer state (built from the clocks, RNG and scheduler).
        mmap: load it memory-mapped (only state that is copied into live tensors).
        doc: one line for ``inspect`` and the docs.
        directory: the entry is a directory of files (a DCP component: shards plus
            ``.metadata``), each recorded by the manifest as ``<entry>/<file>``.
    """

    name: str
    component: str
    phase: Phase
    required: bool
    tracked: str | None
    mmap: bool = False
    doc: str = ""
    directory: bool = False


@attrs.frozen
class CheckpointPlan:
    """An ordered table of :class:`PlanEntry` (bulk entries first, then control state) of
    one format (``format_name``: the manifest's ``format``).

    Raises:
        CheckpointError: an entry names an unknown component or two entries share a name.
    """

    entries: tuple[PlanEntry, ...]
    format_name: str = "consolidated"

    def __attrs_post_init__(self) -> None:
        names = [e.name for e in self.entries]
        problems = [f"entry {n!r} appears twice" for n in sorted(set(names)) if names.count(n) > 1]
        problems += [
            f"entry {e.name!r} names component {e.component!r}; expected one of "
            f"{list(FULL_COMPONENTS)}"
            for e in self.entries
            if e.component not in FULL_COMPONENTS
        ]
        if problems:
            raise CheckpointError("checkpoint plan: " + "; ".join(problems))

    def __iter__(self) -> Iterator[PlanEntry]:
        return iter(self.entries)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    @property
    def required_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries if e.required)

    def entry(self, name: str) -> PlanEntry:
        """The entry called ``name``.

        Raises:
            CheckpointError: no entry has that name.
        """
        for e in self.entries:
            if e.name == name:
                return e
        raise CheckpointError(f"checkpoint plan has no entry {name!r}; entries: {list(self.names)}")

    def for_tracked(self, attribute: str) -> PlanEntry:
        """The entry that captures from / loads into ``tracked.<attribute>``."""
        for e in self.entries:
            if e.tracked == attribute:
                return e
        raise CheckpointError(f"checkpoint plan has no entry for tracked {attribute!r}")

    def in_phase(self, phase: Phase) -> tuple[PlanEntry, ...]:
        """The entries written in ``phase``, in plan order."""
        return tuple(e for e in self.entries if e.phase == phase)

    def selected(self, *, present: Callable[[PlanEntry], bool]) -> tuple[PlanEntry, ...]:
        """Required entries plus the optional ones for which ``present(entry)`` is true."""
        return tuple(e for e in self.entries if e.required or present(e))

    def save_plan(
        self,
        iteration: int,
        *,
        with_data: bool,
        format_name: str | None = None,
        copies: tuple[str, ...] = (),
    ) -> SavePlan:
        """The :class:`SavePlan` of one full save (what the manifest records; ``files`` are
        the entry names, a directory entry standing for every file under it; ``copies``: the
        copy entries written, ``("old", "ref")``, :func:`saved_copies`)."""
        chosen = self.selected(
            present=lambda e: (with_data and e.tracked == "data") or e.tracked in copies
        )
        return SavePlan(
            iteration,
            format_name or self.format_name,
            FULL_COMPONENTS,
            tuple(sorted(e.name for e in chosen)),
        )

    def payloads(
        self, tracked: Any, trainer: Any, *, data: Any = None
    ) -> dict[str, Callable[[], Any]]:
        """Zero-argument producers of each entry's payload, for the save's ``stage`` step.

        A tracked object's producer checks what its ``state_dict()`` returned with
        :func:`~statecraft.checkpoint.state.safe_values.require_safe` (one type check per leaf),
        so a value ``torch.load(weights_only=True)`` cannot read back (a custom object in a
        module's extra state, a NumPy learning rate in a param group) refuses the save in its
        ``stage`` step, before anything is written.

        Args:
            tracked: the tracked objects (``model``, ``optimizer``, ``data`` attributes).
            trainer: the captured ``TrainerState`` (its ``to_payload`` produces ``trainer.pt``).
            data: every rank's data state (a
                :class:`~statecraft.checkpoint.state.data_state.DataState`, its ``to_payload``
                produces ``data.pt``); required when a data source is tracked.

        Raises:
            CheckpointError: a required object is not tracked, or a data source is tracked
                without its gathered ``data`` state.
        """
        out: dict[str, Callable[[], Any]] = {}
        for e in self.entries:
            if e.tracked is None:
                out[e.name] = trainer.to_payload
                continue
            obj = getattr(tracked, e.tracked, None)
            if obj is None:
                if e.required:
                    raise CheckpointError(
                        f"checkpoint plan entry {e.name!r} needs tracked {e.tracked!r}; call "
                        "Checkpointer.track(...) with it"
                    )
                continue
            if e.tracked == "data":
                if data is None:
                    raise CheckpointError(
                        f"checkpoint plan entry {e.name!r} holds every rank's data state: pass "
                        "data=gather_data_state(tracked.data, collective=...)"
                    )
                out[e.name] = data.to_payload
                continue
            produce = obj.state_dict
            if e.tracked == "model" and getattr(tracked, "ema", None) is not None:
                produce = partial(model_payload, obj, tracked.ema)  # + the maintained EMA's
            out[e.name] = _checked(
                produce, e.tracked, iteration=getattr(trainer, "optimizer_step", None)
            )
        return out


def _checked(produce: Callable[[], Any], root: str, *, iteration: int | None) -> Callable[[], Any]:
    """``produce`` (a ``state_dict`` method) whose result must load back weights_only."""

    def checked() -> Any:
        state = produce()
        require_safe({root: state}, action=f"save the checkpoint of step {iteration}")
        return state

    return checked


CHECKPOINT_PLAN = CheckpointPlan(
    (
        PlanEntry(
            "model.pt", "model", Phase.BULK, True, "model", mmap=True, doc="model state_dict"
        ),
        PlanEntry("optim.pt", "optimizer", Phase.BULK, True, "optimizer", doc="optimizer state"),
        PlanEntry(
            "old.pt",
            "training_state",
            Phase.BULK,
            False,
            "old",
            mmap=True,
            doc="moving old policy state_dict",
        ),
        PlanEntry(
            "ref.pt",
            "training_state",
            Phase.BULK,
            False,
            "ref",
            mmap=True,
            doc="moving reference state_dict",
        ),
        PlanEntry(
            TRAINER_ENTRY,
            "training_state",
            Phase.CONTROL,
            True,
            None,
            doc="clocks, RNG streams, scheduler",
        ),
        PlanEntry(
            "data.pt", "training_state", Phase.CONTROL, False, "data", doc="data source cursor"
        ),
    )
)

#: the plan entries' tracked attributes that hold the model's moving copies
COPY_ENTRIES = ("old", "ref")


def saved_copies(tracked: Any) -> tuple[str, ...]:
    """The copy entries (:data:`COPY_ENTRIES`) a save of ``tracked`` writes: what its
    ``copies`` (``ModelCopies``, set when a copy is tracked) decided for this save."""
    copies = getattr(tracked, "copies", None)
    return () if copies is None else tuple(copies.saved_entries())


_TRAINER = PlanEntry(
    TRAINER_ENTRY,
    "training_state",
    Phase.CONTROL,
    True,
    None,
    doc="clocks, RNG streams, scheduler",
)
_DATA = PlanEntry(
    "data.pt", "training_state", Phase.CONTROL, False, "data", doc="data source cursor"
)

DCP_PLAN = CheckpointPlan(
    (
        PlanEntry(
            "model",
            "model",
            Phase.BULK,
            True,
            "model",
            doc="model state: DCP directory (per-rank shards + .metadata)",
            directory=True,
        ),
        PlanEntry(
            "optim",
            "optimizer",
            Phase.BULK,
            True,
            "optimizer",
            doc="optimizer state: DCP directory (per-rank shards + .metadata)",
            directory=True,
        ),
        _TRAINER,
        _DATA,
    ),
    format_name="dcp",
)

#: format name -> its plan table
#: ``checkpoint_format=incremental``: the consolidated entries, whose large tensors are blobs
#: of the attempt's content-addressed store (``statecraft.writers.incremental``)
INCREMENTAL_PLAN = CheckpointPlan(CHECKPOINT_PLAN.entries, format_name="incremental")

PLANS: dict[str, CheckpointPlan] = {
    "consolidated": CHECKPOINT_PLAN,
    "dcp": DCP_PLAN,
    "incremental": INCREMENTAL_PLAN,
}


def plan_for(format_name: str) -> CheckpointPlan:
    """The plan table of checkpoints of ``format_name`` (a manifest's ``format``).

    Raises:
        CheckpointError: no such format.
    """
    try:
        return PLANS[format_name]
    except KeyError:
        raise CheckpointError(
            f"checkpoint format {format_name!r} is not known; expected one of {sorted(PLANS)} "
            "(a newer statecraft wrote it, or the manifest was edited)"
        ) from None


def entry_of(file_name: str) -> str:
    """The plan entry a manifest file belongs to: ``model/__0_0.distcp`` -> ``model``,
    ``trainer.pt`` -> ``trainer.pt``."""
    return file_name.split("/", 1)[0]


def full_save_plan(
    iteration: int, *, with_data: bool, format_name: str = "consolidated"
) -> SavePlan:
    """The full plan of the format's table: every required entry, ``data.pt`` when a data
    source is tracked."""
    return plan_for(format_name).save_plan(iteration, with_data=with_data)
