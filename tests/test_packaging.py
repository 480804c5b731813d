"""The wheel's package list names every package of the source tree (a package left out of
``pyproject.toml`` would be missing from a non-editable install)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject() -> None:
    """Each directory under statecraft/ with an __init__.py is in [tool.setuptools] packages."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "statecraft").rglob("__init__.py")
    }
    assert found - listed == set(), f"add to pyproject.toml packages: {sorted(found - listed)}"


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
