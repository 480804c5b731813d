"""What the ``statecraft demo`` training process trains: an MLP with dropout on a fixed synthetic
regression problem, a warmup + cosine learning-rate factor, a held-out loss, and
:class:`ShuffledBatches`, a shuffled data source that resumes exactly.

Everything here is deterministic given the seed; :mod:`statecraft.cli.demo_train` runs it
through the public checkpoint API. It lives in the package (not in ``examples/``) so that
``statecraft demo`` works from an installed wheel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = [
    "BATCH_SIZE",
    "HELDOUT",
    "HIDDEN_DIM",
    "INPUT_DIM",
    "NUM_EXAMPLES",
    "WARMUP_STEPS",
    "ShuffledBatches",
    "build_model",
    "heldout_loss",
    "make_dataset",
    "warmup_cosine",
]

NUM_EXAMPLES = 2048
INPUT_DIM = 32
HIDDEN_DIM = 256
BATCH_SIZE = 64
WARMUP_STEPS = 5
HELDOUT = 256  # held-out examples the validation evaluates on


class ShuffledBatches:
    """Mini-batches of indices drawn from a fresh permutation every epoch, resumable exactly.

    The state is three integers: the epoch, the position inside that epoch's permutation, and
    the base seed. The permutation itself is never stored: it is recomputed from a
    ``torch.Generator`` seeded by ``(seed, epoch)``, so a restored source continues with the
    very same batches. The last incomplete batch of an epoch is dropped.

    Args:
        num_examples: dataset size.
        batch_size: indices per batch (at most ``num_examples``).
        seed: the base seed of every epoch's permutation.

    Raises:
        ValueError: a size is not a positive int or the batch is larger than the dataset.

    Example:
        >>> src = ShuffledBatches(8, 4, seed=0)
        >>> a = src.next_indices(); state = src.state_dict(); b = src.next_indices()
        >>> src.load_state_dict(state); torch.equal(src.next_indices(), b)
        True
    """

    def __init__(self, num_examples: int, batch_size: int, *, seed: int) -> None:
        if not 0 < batch_size <= num_examples:
            raise ValueError(
                f"batch_size must be in [1, num_examples={num_examples}], got {batch_size}"
            )
        self.num_examples = num_examples
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._perm: torch.Tensor | None = None

    def __repr__(self) -> str:
        return (
            f"ShuffledBatches(epoch={self.epoch}, position={self.position}, "
            f"seed={self.seed}, batch_size={self.batch_size})"
        )

    def _permutation(self) -> torch.Tensor:
        if self._perm is None:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._perm = torch.randperm(self.num_examples, generator=generator)
        return self._perm

    def next_indices(self) -> torch.Tensor:
        """The next batch of example indices (advances the position, and the epoch at its end)."""
        if self.position + self.batch_size > self.num_examples:
            self.epoch += 1
            self.position = 0
            self._perm = None
        batch = self._permutation()[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the cursor; the permutation is recomputed lazily from ``(seed, epoch)``.

        Raises:
            ValueError: ``state`` is not ``{"epoch", "position", "seed"}`` of non-negative ints.
        """
        keys = ("epoch", "position", "seed")
        if (
            not isinstance(state, dict)
            or sorted(state) != sorted(keys)
            or not all(type(state[k]) is int and state[k] >= 0 for k in keys)
        ):
            raise ValueError(
                f"ShuffledBatches state must be {{'epoch', 'position', 'seed'}} of non-negative "
                f"ints, got {state!r}; pass what state_dict() returned"
            )
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]
        self._perm = None


def make_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed synthetic regression problem: ``y = sin(x @ w) + 0.1 * noise``."""
    generator = torch.Generator().manual_seed(seed + 7919)
    x = torch.randn(NUM_EXAMPLES, INPUT_DIM, generator=generator)
    w = torch.randn(INPUT_DIM, 1, generator=generator) / math.sqrt(INPUT_DIM)
    y = torch.sin(x @ w) + 0.1 * torch.randn(NUM_EXAMPLES, 1, generator=generator)
    return x, y


def build_model() -> nn.Module:
    """The demo MLP (about 75k parameters); dropout makes resume depend on the RNG state."""
    return nn.Sequential(
        nn.Linear(INPUT_DIM, HIDDEN_DIM),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(HIDDEN_DIM, HIDDEN_DIM),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(HIDDEN_DIM, 1),
    )


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """The LR factor: linear warmup over ``warmup`` steps, then cosine decay to 0 at ``total``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def heldout_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The model's MSE on the held-out set, in eval mode (no dropout, so no random numbers are
    drawn: validating does not change the training trajectory)."""
    model.eval()
    try:
        with torch.no_grad():
            return float(nn.functional.mse_loss(model(x), y))
    finally:
        model.train()
