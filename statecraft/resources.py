"""Where the shipped tables (``machines/``) and specs (``specs/``) are.

In a wheel they live inside the package as ``statecraft/_machines`` and ``statecraft/_specs``
(mapped by ``pyproject.toml``); in a source checkout or editable install they are the
top-level ``machines/`` and ``specs/`` directories of the repository.
"""

from __future__ import annotations

from pathlib import Path

from statecraft.errors import StatecraftError

__all__ = ["machine_path", "machines_dir", "spec_path", "specs_dir"]

_PACKAGE = Path(__file__).resolve().parent


def _locate(installed: str, source: str) -> Path:
    for candidate in (_PACKAGE / installed, _PACKAGE.parent / source):
        if candidate.is_dir() and any(candidate.glob("*.toml")):
            return candidate.resolve()
    raise StatecraftError(
        f"cannot find statecraft's {source}/ directory (looked in {_PACKAGE / installed} and "
        f"{_PACKAGE.parent / source}); reinstall statecraft"
    )


def machines_dir() -> Path:
    """The directory holding the transaction tables."""
    return _locate("_machines", "machines")


def specs_dir() -> Path:
    """The directory holding the transaction specs."""
    return _locate("_specs", "specs")


def machine_path(name: str) -> Path:
    """The table file of machine ``name``."""
    return machines_dir() / f"{name}.toml"


def spec_path(name: str) -> Path:
    """The spec file of machine ``name``."""
    return specs_dir() / f"{name}.toml"
