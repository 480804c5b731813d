"""The command starts without torch: ``statecraft --help`` (and every subcommand's ``--help``)
and ``import statecraft`` load no tensor library; each public name still resolves, loading
its module on first use. Measured as "torch not in sys.modules", never as a wall-clock time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import statecraft

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import sys
from statecraft.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("TORCH-LOADED" if "torch" in sys.modules else "TORCH-ABSENT", file=sys.stderr)
"""


def _fresh(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE.format(argv=argv)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["inspect", "--help"],
        ["demo", "--help"],
        ["bench", "--help"],
        ["crashcheck", "--help"],
        ["lease", "--help"],
        ["archive", "--help"],
        ["machines", "table"],
    ],
)
def test_help_and_torch_free_commands_never_import_torch(argv: list[str]) -> None:
    """Printing help (or the machines table) in a fresh interpreter leaves torch unloaded."""
    done = _fresh(argv)
    assert "TORCH-ABSENT" in done.stderr, done.stderr[-2000:]
    assert "usage: statecraft" in done.stdout or argv == ["machines", "table"], done.stdout


def test_the_probe_sees_torch_when_a_command_loads_it() -> None:
    """The check can fail: touching a public name whose module needs torch loads it."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, statecraft; statecraft.Checkpointer; "
         "print('torch' in sys.modules)"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.stdout.strip() == "True"


def test_import_statecraft_is_lazy_and_every_public_name_resolves() -> None:
    """``import statecraft`` loads no torch; every name of ``__all__`` has a lazy entry and
    resolves to the object its module defines."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, statecraft; print('torch' in sys.modules)"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.stdout.strip() == "False"
    lazy = statecraft._LAZY
    assert set(lazy) | {"__version__"} == set(statecraft.__all__)
    import importlib

    for name, module in lazy.items():
        assert getattr(statecraft, name) is getattr(importlib.import_module(module), name)
    assert set(statecraft.__all__) <= set(dir(statecraft))
    with pytest.raises(AttributeError, match="no_such_name"):
        statecraft.no_such_name  # noqa: B018 - the attribute access is the test


def test_help_is_plain_text() -> None:
    """``statecraft --help`` and the inspect help carry no reStructuredText markup and
    document the PATH argument."""
    done = _fresh(["--help"])
    assert "``" not in done.stdout
    assert "usage: statecraft" in done.stdout
    inspect_help = _fresh(["inspect", "--help"]).stdout
    assert "``" not in inspect_help
    assert "PATH" in inspect_help
    assert "Lightning" in inspect_help
    assert "--files" in inspect_help
