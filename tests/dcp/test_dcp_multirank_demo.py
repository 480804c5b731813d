"""``statecraft demo --format dcp``: both runs are 2-rank gloo jobs saving DCP checkpoints; a
SIGKILL takes the whole job; the killed run's checkpoints end bit-identical to the reference's,
DCP components compared by their full state."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from statecraft.cli import main

pytestmark = pytest.mark.slow


def test_demo_format_dcp_ends_bit_exact(tmp_path: Path) -> None:
    """One kill, no preemption, 8 steps: exit 0, bit-exact, every launch under
    torch.distributed.run with 2 ranks, and the committed iterations hold DCP components."""
    out = io.StringIO()
    argv = ["demo", "--format", "dcp", "--json", "--steps", "8", "--save-every", "2"]
    argv += ["--kills", "1", "--no-preempt", "--seed", "1", "--out", str(tmp_path / "demo")]
    with contextlib.redirect_stdout(out):
        code = main(argv)
    envelope = json.loads(out.getvalue())
    assert code == 0, envelope
    data = envelope["data"]
    assert data["bit_exact"] is True
    assert data["kills_performed"] == 1
    assert data["compared"]
    for launch in data["launches"]:
        assert "torch.distributed.run" in launch["command"]
        assert launch["command"][launch["command"].index("--nproc-per-node") + 1] == "2"
        assert "--format" in launch["command"]
    [iteration] = (tmp_path / "demo" / "killed").glob("**/checkpoints/iter_000000008")
    assert (iteration / "model" / ".metadata").is_file()
    assert sorted(p.name for p in (iteration / "model").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
