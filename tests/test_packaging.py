"""Packaging: the wheel finds every package by itself (no hand-kept list), ships the tables and
specs inside the package, and the frameworks stay extras."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_packages_are_found_not_listed() -> None:
    """pyproject.toml discovers the packages (``packages.find``), and every directory of modules
    under statecraft/ is a regular package that discovery finds."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["packages"] == {"find": {"include": ["statecraft", "statecraft.*"]}}
    missing = sorted(
        str(folder.relative_to(REPO))
        for folder in {module.parent for module in (REPO / "statecraft").rglob("*.py")}
        if not (folder / "__init__.py").is_file()
    )
    assert missing == [], f"add an __init__.py (with a docstring saying what it owns) to {missing}"


def test_tables_and_specs_ship_inside_the_package() -> None:
    """statecraft/_machines and statecraft/_specs are links to the top-level machines/ and
    specs/, so a wheel carries the very files reviewers read."""
    assert (REPO / "statecraft" / "_machines").resolve() == REPO / "machines"
    assert (REPO / "statecraft" / "_specs").resolve() == REPO / "specs"


_FRAMEWORKS = ("pytorch_lightning", "lightning", "lightning_fabric", "transformers", "accelerate")


def test_the_frameworks_are_extras_never_core_requirements() -> None:
    """Lightning and the Trainer are optional extras: not in the core dependencies."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    core = " ".join(config["project"]["dependencies"])
    assert not [f for f in ("lightning", "transformers", "accelerate") if f in core]
    extras = config["project"]["optional-dependencies"]
    assert any("pytorch-lightning" in r for r in extras["lightning"])
    assert any("transformers" in r for r in extras["hf"])


def test_core_and_the_commands_import_no_framework() -> None:
    """``import statecraft``, the unit machines, the commands and the framework-free half of
    the Lightning integration load without Lightning or transformers (a fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import sys, statecraft, statecraft.checkpoint.units, statecraft.cli.main, "
        "statecraft.integrations.lightning_slots\n"
        "from statecraft.checkpoint.units import seal_unit\n"
        f"print(sorted(m for m in {_FRAMEWORKS!r} if m in sys.modules))"
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
