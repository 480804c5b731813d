"""Crash scenarios of the shipped checkpoint machines, run by ``tests/`` and ``statecraft
crashcheck``.

Each scenario runs the production save machine with its production bindings over the
production ``LocalStore``, acting on a :class:`~statecraft.storage.SimWorld` disk. Recovery
is what a restarted training process does: ``resume=auto`` (the production resume machine,
loading into real torch objects), then the retry of the interrupted save, then another
``resume=auto``. The checks in :mod:`statecraft.proofs.save_checks` prove ``specs/save.toml``
and ``specs/resume.toml`` on the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from statecraft.checkpoint.layout import LATEST_POINTER, iter_dirname
from statecraft.checkpoint.machines import load_machine
from statecraft.checkpoint.state import TrainerState
from statecraft.checkpoint.transactions.resume import ResumeContext, ResumeResult, Tracked
from statecraft.checkpoint.transactions.save import SaveContext, full_save_plan
from statecraft.engine import CrashPlan, Machine, RunResult
from statecraft.storage.base import Store
from statecraft.storage.sim import SimWorld

__all__ = [
    "CHECKPOINTS_ROOT",
    "Cursor",
    "Recovery",
    "SaveScenario",
    "expected_payloads",
    "save_scenarios",
]

CHECKPOINTS_ROOT = "/out/proj/group/name/20260101000000/checkpoints"


class Cursor:
    """A minimal data source: its state is one position."""

    def __init__(self, position: int = -1) -> None:
        self.position = position

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def _model() -> torch.nn.Linear:
    return torch.nn.Linear(2, 2)


def expected_payloads(iteration: int, *, with_data: bool) -> dict[str, Callable[[], Any]]:
    """Deterministic payloads of ``iteration``: every weight equals the iteration number, so a
    check can tell which checkpoint was loaded."""
    model = _model()
    with torch.no_grad():
        model.weight.fill_(float(iteration))
        model.bias.fill_(float(iteration))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = TrainerState(optimizer_step=iteration, attempt_id=iteration, rng=None)
    payloads: dict[str, Callable[[], Any]] = {
        "model.pt": model.state_dict,
        "optim.pt": optimizer.state_dict,
        "trainer.pt": trainer.to_payload,
    }
    if with_data:
        payloads["data.pt"] = Cursor(iteration).state_dict
    return payloads


@attrs.frozen
class Recovery:
    """What the restarted process did and saw."""

    resume: ResumeResult
    loaded_weight: float | None
    loaded_position: int | None
    retry: RunResult
    resume_after: ResumeResult


def _resume(store: Store, machine: Machine, *, with_data: bool) -> tuple[ResumeResult, Tracked]:
    model = _model()
    tracked = Tracked(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data=Cursor() if with_data else None,
    )
    ctx = ResumeContext(mode="auto", tracked=tracked, store=store)
    machine.run(ctx).raise_for_failure()
    if ctx.result is None:
        raise RuntimeError("resume machine ended without a result")
    return ctx.result, tracked


@attrs.define
class SaveScenario:
    """Save ``target`` after ``previous`` checkpoints were committed.

    Attributes:
        setup_extra: damage or leftovers applied to the disk after the previous checkpoints
            are committed (then made durable), e.g. a half-written ``iter_<target>``.
        machine_factory: the save machine to run (tests swap in deliberately broken tables).
        resume_factory: the resume machine the restarted process runs.
        store_factory: the store over the world's disk (tests swap in broken filesystems).
    """

    name: str
    target: int
    previous: tuple[int, ...] = ()
    with_data: bool = True
    setup_extra: Callable[[SimWorld], None] | None = None
    machine_factory: Callable[[], Machine] = attrs.field(default=lambda: load_machine("save"))
    resume_factory: Callable[[], Machine] = attrs.field(default=lambda: load_machine("resume"))
    store_factory: Callable[[SimWorld], Store] = attrs.field(
        default=lambda world: world.local_store(CHECKPOINTS_ROOT)
    )
    machine: str = "save"
    recovery_may_fail: bool = False

    def _save(
        self, world: SimWorld, iteration: int, *, crash: CrashPlan | None = None, gate: Any = None
    ) -> RunResult:
        ctx = SaveContext(
            store=self.store_factory(world),
            plan=full_save_plan(iteration, with_data=self.with_data),
            payloads=expected_payloads(iteration, with_data=self.with_data),
        )
        return self.machine_factory().recover(ctx, crash=crash, gate=gate)

    def setup(self, world: SimWorld) -> None:
        for iteration in self.previous:
            load_machine("save").recover(
                SaveContext(
                    store=world.local_store(CHECKPOINTS_ROOT),
                    plan=full_save_plan(iteration, with_data=self.with_data),
                    payloads=expected_payloads(iteration, with_data=self.with_data),
                )
            ).raise_for_failure()
        world.local_store(CHECKPOINTS_ROOT)
        if self.setup_extra is not None:
            self.setup_extra(world)

    def run(self, world: SimWorld, *, crash: CrashPlan | None) -> RunResult:
        return self._save(world, self.target, crash=crash, gate=world.gate)

    def recover(self, world: SimWorld) -> Recovery:
        resume, tracked = _resume(
            self.store_factory(world), self.resume_factory(), with_data=self.with_data
        )
        weight = float(tracked.model.weight[0, 0].item()) if resume.resumed else None
        position = tracked.data.position if resume.resumed and tracked.data is not None else None
        retry = self._save(world, self.target)
        retry.raise_for_failure()
        resume_after, _ = _resume(
            self.store_factory(world), self.resume_factory(), with_data=self.with_data
        )
        return Recovery(resume, weight, position, retry, resume_after)


def _leftovers_of(iteration: int) -> Callable[[SimWorld], None]:
    def damage(world: SimWorld) -> None:
        store = world.local_store(CHECKPOINTS_ROOT)
        name = iter_dirname(iteration)
        store.make_dirs(name)
        store.write_atomic(f"{name}/model.pt", b"half a model from a killed save")
        handle = world.fs.open_write(f"{CHECKPOINTS_ROOT}/{name}/.optim.pt.tmp-1-1", exclusive=True)
        world.fs.write(handle, b"torn")
        world.fs.close(handle)

    return damage


def _committed_without_pointer(iteration: int, pointer_to: int) -> Callable[[SimWorld], None]:
    def commit(world: SimWorld) -> None:
        load_machine("save").recover(
            SaveContext(
                store=world.local_store(CHECKPOINTS_ROOT),
                plan=full_save_plan(iteration, with_data=True),
                payloads=expected_payloads(iteration, with_data=True),
            )
        ).raise_for_failure()
        world.local_store(CHECKPOINTS_ROOT).write_atomic(
            LATEST_POINTER, f"{iter_dirname(pointer_to)}\n".encode()
        )

    return commit


def _bit_flip(iteration: int, file_name: str) -> Callable[[SimWorld], None]:
    def flip(world: SimWorld) -> None:
        path = f"{CHECKPOINTS_ROOT}/{iter_dirname(iteration)}/{file_name}"
        data = bytearray(world.fs.read(path))
        data[len(data) // 2] ^= 0x01
        temp = path + ".flip"
        handle = world.fs.open_write(temp, exclusive=True)
        world.fs.write(handle, bytes(data))
        world.fs.fsync(handle)
        world.fs.close(handle)
        world.fs.rename(temp, path)

    return flip


def save_scenarios() -> list[SaveScenario]:
    """The scenarios ``statecraft crashcheck`` runs for the save and resume machines."""
    return [
        SaveScenario("first-save", target=2, with_data=False),
        SaveScenario("next-save", target=4, previous=(2,)),
        SaveScenario(
            "retry-commits-pointer-only",
            target=4,
            previous=(2,),
            setup_extra=_committed_without_pointer(4, pointer_to=2),
        ),
        SaveScenario("save-over-leftovers", target=4, previous=(2,), setup_extra=_leftovers_of(4)),
        SaveScenario(
            "newest-is-corrupt", target=6, previous=(2, 4), setup_extra=_bit_flip(4, "model.pt")
        ),
    ]
