"""Lightning's ``CheckpointIO`` base class, from whichever distribution is installed.

Lightning ships twice: ``pip install lightning`` (``import lightning.pytorch as L``, the base
class in ``lightning.fabric``) and ``pip install pytorch-lightning`` (``import
pytorch_lightning as pl``, the base class in ``lightning_fabric``). Each ``Trainer`` accepts a
plugin only if it is an instance of its own ``CheckpointIO``. The plugin subclasses one
(:data:`CheckpointIO`) and :func:`register_everywhere` registers it as a virtual subclass of
the others (``CheckpointIO`` is an ``abc.ABC``), so both ``Trainer`` classes accept it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["FOUND_BASES", "CheckpointIO", "register_everywhere"]

_BASES = (
    "lightning.fabric.plugins.io.checkpoint_io",  # pip install lightning
    "lightning_fabric.plugins.io.checkpoint_io",  # pip install pytorch-lightning
)


def _checkpoint_io_bases() -> list[Any]:
    found = []
    for module in _BASES:
        try:
            found.append(importlib.import_module(module).CheckpointIO)
        except ImportError:
            continue
    return found


FOUND_BASES = _checkpoint_io_bases()
"""The ``CheckpointIO`` class of every Lightning distribution installed."""

if not FOUND_BASES:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "statecraft.integrations.lightning needs Lightning: pip install "
        "'statecraft[lightning]' (it installs lightning and pytorch-lightning; either one "
        "is enough)"
    )

if TYPE_CHECKING:
    from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO
else:
    CheckpointIO = FOUND_BASES[-1]


def register_everywhere(cls: type) -> None:
    """Make ``cls`` (a subclass of :data:`CheckpointIO`) an instance of every installed
    distribution's ``CheckpointIO``."""
    for base in FOUND_BASES:
        if not issubclass(cls, base):
            base.register(cls)
