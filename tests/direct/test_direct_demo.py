"""``statecraft demo --store s3``: a local SeaweedFS started and stopped by the demo, a run
SIGKILLed and relaunched (lease taken over deliberately), ending bit-exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statecraft.cli import main

pytestmark = pytest.mark.slow


def test_demo_store_s3_ends_bit_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["demo", "--store", "s3", "--steps", "6", "--save-every", "2", "--kills", "1"]
    code = main([*argv, "--seed", "3", "--out", str(tmp_path / "demo"), "--json"])
    envelope = json.loads(capsys.readouterr().out)
    assert code == 0, envelope
    assert envelope["data"]["bit_exact"] is True
    [kill] = envelope["data"]["kills"]
    assert kill["latest"] is not None  # every kill left latest naming a committed iteration
    assert not list((tmp_path / "demo").glob("*/**/iter_*"))  # checkpoints live in the bucket
