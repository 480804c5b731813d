"""Two real ``torch.distributed`` (gloo) ranks running ``Trainer.train`` with the callback:
every rank's files are in the commit, the limit is applied once, both ranks finish."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import hf_runs

from statecraft.checkpoint.units import verify_unit
from statecraft.storage.local import LocalStore

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_ranks_seal_every_ranks_files_once(tmp_path: Path) -> None:
    """Rank 0 seals after both ranks wrote their ``rng_state_<rank>.pth`` (the barrier), so
    the manifest names both; ``save_total_limit=1`` leaves only the newest folder; neither
    rank raises or hangs."""
    out = tmp_path / "out"
    port = _free_port()
    procs = []
    logs = []
    for rank in (0, 1):
        env = hf_runs.child_env()
        env.update(
            WORLD_SIZE="2",
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        log = tmp_path / f"rank{rank}.log"
        logs.append(log)
        command = [sys.executable, str(hf_runs.SCRIPT), "--out", str(out), "--max-steps", "4"]
        command += ["--save-steps", "2", "--save-total-limit", "1"]
        procs.append(
            subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        )
    try:
        for proc, log in zip(procs, logs, strict=True):
            assert proc.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-4"]
    verdict = verify_unit(LocalStore(str(out)), "checkpoint-4", deep=True)
    assert verdict.committed, verdict.reason
    assert verdict.manifest is not None
    assert {"rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"} <= set(
        verdict.manifest.files
    )
