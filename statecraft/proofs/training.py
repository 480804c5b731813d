"""What the save scenarios train: small torch objects whose every tracked piece of state
identifies the iteration it belongs to, and whose payloads differ between a run and its retry.

- the model's weights and biases all equal the iteration number;
- the optimizer is AdamW with state: ``exp_avg`` = iteration + 0.25, ``exp_avg_sq`` =
  iteration + 0.5, ``step`` = iteration;
- the scheduler is a ``StepLR`` whose ``last_epoch`` is the iteration;
- the RNG streams (python, numpy, torch) are seeded from the iteration;
- the clocks: ``optimizer_step`` = iteration, ``attempt_id`` = iteration + 1, one skip;
- a *salt* (which run wrote the payload: setup, the crashed run, the retry) sits in the data
  cursor's state and in ``trainer.pt`` ``extra``, so a retry never rewrites the same bytes and
  a rewrite of a committed file with fresh payloads is visible in its bytes.

:class:`LoadedState` records what a resume left in the live objects, for RESUME-EXACT.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import numpy as np
import torch

from statecraft.checkpoint.resume.records import Tracked
from statecraft.checkpoint.state import (
    RngInventory,
    TrainerState,
    UpdateClocks,
    capture_rng_state,
    gather_rng_inventory,
)

__all__ = [
    "SALT_RETRY",
    "SALT_RUN",
    "SALT_SETUP",
    "Cursor",
    "LoadedState",
    "expected_payloads",
    "fresh_objects",
    "preserved_rng",
    "rng_at",
    "tracked_at",
]

SALT_SETUP = 0  # checkpoints committed by the scenario's setup
SALT_RUN = 1  # the transaction the explorer crashes
SALT_RETRY = 2  # the restarted process's retry of it


class Cursor:
    """A minimal data source: its state is one position and the salt of the run that made it."""

    def __init__(self, position: int = -1, salt: int = -1) -> None:
        self.position = position
        self.salt = salt

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "salt": self.salt}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])
        self.salt = int(state["salt"])


def _model() -> torch.nn.Linear:
    return torch.nn.Linear(2, 2)


def _optimizer(model: torch.nn.Module) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=0.01)


def _scheduler(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.StepLR:
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000)


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block without changing this process's RNG streams (a resume restores saved
    streams, a fresh model draws its initial weights; thousands of them must not perturb the
    test process). Acts on the CPU streams directly: this runs thousands of times."""
    python, numpy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(cpu)


@functools.lru_cache(maxsize=64)
def _rng_inventory(iteration: int) -> RngInventory:
    with preserved_rng():
        random.seed(1000 + iteration)
        np.random.seed(1000 + iteration)
        torch.manual_seed(1000 + iteration)
        return gather_rng_inventory(rank=0, world_size=1)


def expected_payloads(
    iteration: int, *, with_data: bool, salt: int = SALT_SETUP, copies: bool = False
) -> dict[str, Callable[[], Any]]:
    """The payloads a training run saves at ``iteration`` (see the module doc); ``copies``:
    with a moving old policy and a moving reference (``old.pt``, ``ref.pt``)."""
    return dict(_payloads(iteration, with_data, salt, copies))


def _copy_at(iteration: int, offset: float) -> torch.nn.Linear:
    """A moving copy of the model at ``iteration`` (old: ``+0.5``, reference: ``+0.75``)."""
    with preserved_rng():
        copy = _model()
    with torch.no_grad():
        for p in copy.parameters():
            p.fill_(iteration + offset)
    return copy


def _objects_at(iteration: int) -> tuple[Any, Any, Any, UpdateClocks]:
    """Model, optimizer (with per-parameter state), scheduler and clocks of a run at
    ``iteration``: every value derived from the iteration, so saves are reproducible."""
    with preserved_rng():
        model = _model()
    with torch.no_grad():
        model.weight.fill_(float(iteration))
        model.bias.fill_(float(iteration))
    optimizer = _optimizer(model)
    for p in model.parameters():
        optimizer.state[p] = {
            "step": torch.tensor(float(iteration)),
            "exp_avg": torch.full_like(p, iteration + 0.25),
            "exp_avg_sq": torch.full_like(p, iteration + 0.5),
        }
    scheduler = _scheduler(optimizer)
    scheduler.last_epoch = iteration
    clocks = UpdateClocks(
        optimizer_step=iteration, attempt_id=iteration + 1, skips_total=1, skips_consecutive=0
    )
    return model, optimizer, scheduler, clocks


@functools.lru_cache(maxsize=64)
def _payloads(
    iteration: int, with_data: bool, salt: int, copies: bool = False
) -> dict[str, Callable[[], Any]]:
    """Built once per (iteration, data, salt): serializing never changes the objects."""
    model, optimizer, scheduler, clocks = _objects_at(iteration)
    trainer = TrainerState.capture(
        clocks,
        rng=_rng_inventory(iteration),
        scheduler=scheduler,
        optimizer=optimizer,
        extra={"salt": salt},
    )
    payloads: dict[str, Callable[[], Any]] = {
        "model.pt": model.state_dict,
        "optim.pt": optimizer.state_dict,
        "trainer.pt": trainer.to_payload,
    }
    if with_data:
        payloads["data.pt"] = Cursor(iteration, salt).state_dict
    if copies:
        payloads["old.pt"] = _copy_at(iteration, 0.5).state_dict
        payloads["ref.pt"] = _copy_at(iteration, 0.75).state_dict
    return payloads


@attrs.define
class FreshObjects:
    """The live objects of a restarted process, before resume loads into them."""

    model: torch.nn.Linear
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.StepLR
    data: Cursor | None
    old: torch.nn.Linear | None = None
    ref: torch.nn.Linear | None = None


def fresh_objects(*, with_data: bool, copies: bool = False) -> FreshObjects:
    """A restarted process's freshly built model, optimizer, scheduler and data source (and
    with ``copies``, its moving old policy and reference)."""
    with preserved_rng():
        model = _model()
        old, ref = (_model(), _model()) if copies else (None, None)
    optimizer = _optimizer(model)
    data = Cursor() if with_data else None
    return FreshObjects(model, optimizer, _scheduler(optimizer), data, old, ref)


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if all(type(v) in (int, float, str, bool, type(None)) for v in value):
            return tuple(value)  # an RNG key vector: immutable scalars, no copy needed
        return [_copied(v) for v in value]
    return value


@attrs.frozen
class LoadedState:
    """Copies of what the live objects hold after a resume (RESUME-EXACT compares them with
    the adopted checkpoint's raw files)."""

    model: dict[str, Any]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    data: dict[str, Any] | None
    rng: dict[str, Any]
    clocks: dict[str, int]
    copies: dict[str, Any] = attrs.field(factory=dict)  # "old.pt" / "ref.pt" -> state

    @classmethod
    def of(cls, objects: FreshObjects, clocks: UpdateClocks) -> LoadedState:
        """Copy the state of ``objects``, this process's RNG streams, and ``clocks``."""
        return cls(
            model=_copied(objects.model.state_dict()),
            optimizer=_copied(objects.optimizer.state_dict()),
            scheduler=_copied(objects.scheduler.state_dict()),
            data=None if objects.data is None else objects.data.state_dict(),
            rng=_copied(capture_rng_state()),
            clocks={
                "optimizer_step": clocks.optimizer_step,
                "attempt_id": clocks.attempt_id,
                "skips_total": clocks.skips_total,
                "skips_consecutive": clocks.skips_consecutive,
            },
            copies={
                f"{name}.pt": _copied(module.state_dict())
                for name, module in (("old", objects.old), ("ref", objects.ref))
                if module is not None
            },
        )


@functools.lru_cache(maxsize=64)
def tracked_at(iteration: int, *, salt: int) -> Tracked:
    """The live objects of a run at ``iteration`` as the facade tracks them (no data
    source), holding the state :func:`expected_payloads` describes: for scenarios that save
    through the production :func:`~statecraft.checkpoint.save.saving.save_full_checkpoint`.
    Saving never changes them, so they are built once per (iteration, salt)."""
    model, optimizer, scheduler, clocks = _objects_at(iteration)
    return Tracked(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        clocks=clocks,
        loop_state={"salt": salt},
    )


def rng_at(iteration: int) -> RngInventory:
    """The RNG inventory a run saves at ``iteration`` (seeded from it)."""
    return _rng_inventory(iteration)
