"""A subcommand's handler imported on use, so ``statecraft --help`` and the commands that need
no tensor never import torch."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

__all__ = ["lazy_command"]


def lazy_command(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """The handler ``module.function(args)``, imported when the subcommand runs."""

    def run(args: argparse.Namespace) -> int:
        handler: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(module), function
        )
        return handler(args)

    return run
