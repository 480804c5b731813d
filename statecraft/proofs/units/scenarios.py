"""Crash scenarios of the ``unit_seal`` and ``unit_prune`` machines, run by ``tests/`` and
``statecraft crashcheck``.

Each scenario runs the production machine with its production bindings over the production
``LocalStore`` on a :class:`~statecraft.storage.SimWorld` disk:

- a **slot** save (Lightning's ``last.ckpt`` saved again): seal generation 2 with new bytes,
  retiring generation 1 after the commit;
- a **framework folder** (a Hugging Face ``checkpoint-N``): the "framework" writes its files
  with plain writes (no fsync, as the Trainer does), then the seal adopts them, beside an older
  committed folder;
- a **refused** seal over a committed unit;
- a **prune** of a committed folder beside another one.

Recovery is what a restarted process does: the production reader (the newest unit that
verifies) and then the production retry (the slot saves again; the framework's uncommitted
folder is pruned, rewritten and sealed again; a prune runs again). The checks are in
:mod:`statecraft.proofs.units.checks` (``specs/unit_seal.toml``, ``specs/unit_prune.toml``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import attrs

from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.checkpoint.units import (
    UNIT_MANIFEST_NAME,
    generation_units,
    newest_committed,
    next_generation,
    prune_unit,
    seal_generation,
    seal_unit,
)
from statecraft.checkpoint.units.prune_bindings import UnitPruneContext
from statecraft.checkpoint.units.seal_bindings import Payload, UnitSealContext
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.storage.base import Store
from statecraft.storage.local import is_temporary_name
from statecraft.storage.sim import SimWorld

__all__ = [
    "SLOT",
    "UNITS_ROOT",
    "UnitRecovery",
    "UnitScenario",
    "framework_files",
    "slot_bytes",
    "unit_prune_scenarios",
    "unit_seal_scenarios",
]

#: the store root every unit scenario works in (a Lightning dirpath / a Trainer output_dir)
UNITS_ROOT = "/out/run/checkpoints"
SLOT = "last.ckpt"
FOLDER_OLD = "checkpoint-2"
FOLDER_NEW = "checkpoint-4"


def slot_bytes(label: str) -> dict[str, bytes]:
    """The files of one slot generation: a bulk file and a small one in a subdirectory."""
    return {
        "checkpoint.pt": (f"weights of {label};" * 40).encode(),
        "extra/state.json": f'{{"label": "{label}"}}'.encode(),
    }


def framework_files(step: int) -> dict[str, bytes]:
    """What the framework writes into ``checkpoint-<step>``."""
    return {
        "model.safetensors": (f"tensor bytes of step {step};" * 30).encode(),
        "trainer_state.json": f'{{"global_step": {step}}}'.encode(),
        "rng/rng_state.pth": f"rng of step {step}".encode(),
    }


def _payloads(files: Mapping[str, bytes]) -> dict[str, Payload]:
    def writer(data: bytes) -> Payload:
        def write(f: BinaryIO) -> None:
            half = len(data) // 2
            f.write(data[:half])  # two writes: a power loss may tear between them
            f.write(data[half:])

        return write

    return {name: writer(data) for name, data in files.items()}


def write_like_a_framework(world: SimWorld, folder: str, files: Mapping[str, bytes]) -> None:
    """Write ``files`` under ``UNITS_ROOT/folder`` the way a framework does: mkdir, open,
    write, close; no fsync of any file or directory (every operation is a crash point)."""
    fs = world.fs
    base = f"{UNITS_ROOT}/{folder}"
    made: set[str] = set()
    for name, data in files.items():
        parts = f"{folder}/{name}".split("/")[:-1]
        current = UNITS_ROOT
        for part in parts:
            current = f"{current}/{part}"
            if current not in made and fs.stat(current) is None:
                fs.mkdir(current)
            made.add(current)
        handle = fs.open_write(f"{base}/{name}", exclusive=False)
        fs.write(handle, data)
        fs.close(handle)


@attrs.frozen
class UnitRecovery:
    """What the restarted process saw and did.

    Attributes:
        adopted: the unit the production reader chose first (``None``: none verified).
        adopted_files: that unit's files as the reader found them (relative -> bytes).
        passed_over: ``(unit, state)`` of the newer units it passed over.
        retried: the unit the retry committed (``None`` for a prune or a refusal).
        outcome: the retry's error, when it failed (a refused seal's refusal).
    """

    adopted: str | None
    adopted_files: dict[str, bytes]
    passed_over: tuple[tuple[str, str], ...]
    retried: str | None = None
    outcome: Exception | None = None


@attrs.define
class UnitScenario:
    """One unit transaction after a setup of committed units.

    Attributes:
        name: the scenario's name.
        machine: ``unit_seal`` or ``unit_prune``.
        kind: ``slot`` (save a slot's next generation), ``folder`` (a framework writes a
            folder, the seal adopts it), ``refused`` (a seal over a committed unit),
            ``prune`` (remove a committed folder).
        machine_factory: the machine under test (tests swap in deliberately broken ones).
        retire_machine_factory: the prune machine the seal's retirement runs.
    """

    name: str
    machine: str
    kind: str
    machine_factory: Callable[[], Machine] = attrs.field(default=None)
    retire_machine_factory: Callable[[], Machine] = attrs.field(
        default=lambda: shipped_machine("unit_prune")
    )
    inject_faults: bool = True
    recovery_may_fail: bool = False

    def __attrs_post_init__(self) -> None:
        if self.machine_factory is None:
            name = self.machine
            self.machine_factory = lambda: shipped_machine(name)

    # ------------------------------------------------------------------ what it means
    @property
    def new_unit(self) -> str | None:
        """The unit the run commits (``None``: a prune or a refusal commits nothing)."""
        return {"slot": f"{SLOT}/g00000002", "folder": FOLDER_NEW}.get(self.kind)

    @property
    def new_files(self) -> dict[str, bytes]:
        if self.kind == "slot":
            return slot_bytes("B")
        return framework_files(4)

    @property
    def retired(self) -> tuple[str, ...]:
        """Units the run removes: a slot's older generation, the pruned folder."""
        return {"slot": (f"{SLOT}/g00000001",), "prune": (FOLDER_OLD,)}.get(self.kind, ())

    def candidates(self, store: Store) -> list[str]:
        """The units a reader considers, newest first (the production listing)."""
        if self.kind == "slot":
            return generation_units(store, SLOT)
        return [u for u in (FOLDER_NEW, FOLDER_OLD) if store.stat(u) is not None]

    def store(self, world: SimWorld) -> Store:
        return world.local_store(UNITS_ROOT)

    # ------------------------------------------------------------------ setup
    def setup(self, world: SimWorld) -> None:
        world.fs.makedirs(UNITS_ROOT)
        store = self.store(world)
        if self.kind == "slot":
            seal_generation(store, SLOT, framework="lightning", step=2,
                            payloads=_payloads(slot_bytes("A")))  # fmt: skip
            return
        write_like_a_framework(world, FOLDER_OLD, framework_files(2))
        seal_unit(store, FOLDER_OLD, framework="hf-trainer", step=2)
        if self.kind in ("refused", "prune"):
            write_like_a_framework(world, FOLDER_NEW, framework_files(4))
            seal_unit(store, FOLDER_NEW, framework="hf-trainer", step=4)

    # ------------------------------------------------------------------ run
    def context(self, store: Store) -> UnitSealContext | UnitPruneContext:
        retire_machine = self.retire_machine_factory()
        if self.kind == "slot":
            unit, older = next_generation(store, SLOT)
            return UnitSealContext(
                store, unit, "lightning", 4, payloads=_payloads(slot_bytes("B")),
                retire=tuple(older), retire_machine=retire_machine,
            )  # fmt: skip
        if self.kind == "folder":
            return UnitSealContext(store, FOLDER_NEW, "hf-trainer", 4,
                                   expect=("trainer_state.json",))  # fmt: skip
        if self.kind == "refused":
            return UnitSealContext(store, FOLDER_NEW, "hf-trainer", 4,
                                   payloads=_payloads(framework_files(99)))  # fmt: skip
        return UnitPruneContext(store, FOLDER_OLD)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        if self.kind == "folder":
            # the framework's own writes are part of the run: every one is a crash point
            write_like_a_framework(world, FOLDER_NEW, framework_files(4))
        store = self.store(world)
        ctx = self.context(store)
        return self.machine_factory().recover(ctx, crash=crash, gate=world.gate)

    # ------------------------------------------------------------------ recover
    def recover(self, world: SimWorld) -> UnitRecovery:
        """The restarted process: read the newest committed unit, then retry."""
        store = self.store(world)
        chosen, passed = newest_committed(store, self.candidates(store))
        adopted = None if chosen is None else chosen.unit
        tree = {} if adopted is None else world.fs.tree(f"{UNITS_ROOT}/{adopted}")
        files = {
            name: data
            for name, data in tree.items()
            if name != UNIT_MANIFEST_NAME and not is_temporary_name(name.rsplit("/", 1)[-1])
        }
        passed_over = tuple((v.unit, v.state) for v in passed)
        retried: str | None = None
        outcome: Exception | None = None
        if self.kind == "slot":
            retried = seal_generation(store, SLOT, framework="lightning", step=4,
                                      payloads=_payloads(slot_bytes("B"))).unit  # fmt: skip
        elif self.kind == "folder":
            if adopted != FOLDER_NEW:  # the Trainer saves the step again after the resume
                prune_unit(store, FOLDER_NEW)
                write_like_a_framework(world, FOLDER_NEW, framework_files(4))
                retried = seal_unit(store, FOLDER_NEW, framework="hf-trainer", step=4).unit
            else:
                retried = FOLDER_NEW
        elif self.kind == "prune":  # the restarted process runs the same prune again
            prune_unit(store, FOLDER_OLD, machine=self.machine_factory())
        else:
            try:
                seal_unit(store, FOLDER_NEW, framework="hf-trainer", step=4,
                          payloads=_payloads(framework_files(99)))  # fmt: skip
            except Exception as exc:  # the refusal is the expected outcome
                outcome = exc
        return UnitRecovery(adopted, files, passed_over, retried, outcome)

    def payload_owner(self, files: Mapping[str, bytes]) -> str | None:
        """Which known content ``files`` is: ``old``, ``new`` or ``None`` (neither)."""
        known: dict[str, Any] = {
            "slot": {"old": slot_bytes("A"), "new": slot_bytes("B")},
        }.get(self.kind, {"old": framework_files(2), "new": framework_files(4)})
        for label, expected in known.items():
            if dict(files) == expected:
                return label
        return None


def unit_seal_scenarios() -> list[UnitScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the ``unit_seal`` machine."""
    return [
        UnitScenario("slot-second-generation-retires-the-first", "unit_seal", "slot"),
        UnitScenario("framework-folder-adopted-beside-an-older-one", "unit_seal", "folder"),
        UnitScenario("seal-over-a-committed-unit-is-refused", "unit_seal", "refused"),
    ]


def unit_prune_scenarios() -> list[UnitScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the ``unit_prune`` machine."""
    return [UnitScenario("prune-a-committed-folder-beside-another", "unit_prune", "prune")]
