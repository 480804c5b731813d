"""Real Lightning processes: SIGKILL in the middle of a checkpoint write, then
``fit(ckpt_path="last")`` in a fresh process, bit-exact against an uninterrupted run; the same
situation with Lightning's default ``TorchCheckpointIO``, which picks the torn ``last.ckpt``
and fails; and SLURM's SIGUSR1 (Lightning owns it) saving a committed ``hpc_ckpt_N.ckpt`` and
requeueing through a stub ``scontrol``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("pytorch_lightning")

from lightning_runs import BATCHES, build_module, build_trainer, final_state

from statecraft.checkpoint.units import UNIT_MANIFEST_NAME, generation_units, verify_unit
from statecraft.integrations.lightning import (
    CHECKPOINT_FILE,
    SLOTS_DIR,
    StatecraftCheckpointIO,
    committed_checkpoint_file,
)
from statecraft.storage.local import LocalStore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RUNS = Path(__file__).resolve().parents[1] / "lightning_runs.py"
EPOCHS = 3
BLOCK_EPOCH = 1  # the kill lands while last.ckpt of this epoch is being written


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _launch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RUNS), "fit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env or _env(),
    )


def _wait_for(path: Path, child: subprocess.Popen[str], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if child.poll() is not None:
            out = child.stdout.read() if child.stdout else ""
            pytest.fail(f"the child exited ({child.returncode}) before {what}:\n{out[-3000:]}")
        if time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    assert child.returncode == -signal.SIGKILL


def _tensors_equal(a: Any, b: Any, where: str = "") -> list[str]:
    """Every key path where ``a`` and ``b`` differ (tensors by torch.equal)."""
    if isinstance(a, torch.Tensor):
        ok = isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
        return [] if ok else [where]
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return [f"{where} keys"]
        return [d for k in a for d in _tensors_equal(a[k], b[k], f"{where}[{k!r}]")]
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [f"{where} length"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _tensors_equal(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [where]


def _fit_in_process(root: Path, epochs: int, *, io: str, ckpt_path: str | None = None) -> Any:
    import pytorch_lightning as pl

    pl.seed_everything(0, verbose=False)
    module = build_module()
    trainer = build_trainer(str(root), epochs, io=io)
    trainer.fit(module, ckpt_path=ckpt_path)
    return module, trainer


@pytest.mark.usefixtures("torch_determinism_restored")
def test_sigkill_mid_write_then_resume_last_is_bit_exact(tmp_path: Path) -> None:
    """A process SIGKILLed inside torch.save of last.ckpt leaves a generation without a
    manifest; a fresh process's fit(ckpt_path="last") passes over it (logged), resumes from
    the previous committed generation, and ends bit-identical to an uninterrupted run."""
    root, marker = tmp_path / "run", tmp_path / "blocked"
    killed = _launch(
        "--root", str(root), "--epochs", str(EPOCHS),
        "--block-epoch", str(BLOCK_EPOCH), "--marker", str(marker),
    )  # fmt: skip
    module, trainer = _fit_in_process(tmp_path / "reference", EPOCHS, io="statecraft")
    reference = final_state(module, trainer)
    _wait_for(marker, killed, "the checkpoint write blocked")
    ckpts = root / "ckpts"
    store = LocalStore(str(ckpts / SLOTS_DIR))
    newest, previous = generation_units(store, "last.ckpt")[:2]
    # the premise: the kill lands mid-write (generation dir without its manifest)
    assert verify_unit(store, newest).state == "uncommitted"
    assert verify_unit(store, previous).committed
    _kill(killed)
    assert verify_unit(store, newest).state == "uncommitted"
    assert not (ckpts / SLOTS_DIR / newest / UNIT_MANIFEST_NAME).exists()
    # the file at the familiar path still names the previous committed generation
    assert os.readlink(ckpts / "last.ckpt") == f"{SLOTS_DIR}/{previous}/{CHECKPOINT_FILE}"

    result = tmp_path / "resumed.pt"
    resumed = _launch("--root", str(root), "--epochs", str(EPOCHS), "--ckpt-path", "last",
                      "--result", str(result))  # fmt: skip
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out[-3000:]
    assert "g00000002" in out, out[-3000:]  # the passed-over generation, logged
    assert "uncommitted" in out
    state = torch.load(result, weights_only=True)
    assert state["global_step"] == reference["global_step"] == EPOCHS * BATCHES
    assert _tensors_equal(reference["model"], state["model"]) == []
    assert _tensors_equal(reference["optimizer"], state["optimizer"]) == []


@pytest.mark.usefixtures("torch_determinism_restored")
def test_default_torch_io_picks_a_torn_last_ckpt(tmp_path: Path) -> None:
    """Lightning's own TorchCheckpointIO in the same situation: last.ckpt torn (the prefix a
    killed cross-device copy or a power loss leaves: _atomic_save never fsyncs, and moves
    from $TMPDIR by copying when it is another filesystem) is what ckpt_path="last" picks,
    and the fit fails although an intact checkpoint of the same step lies beside it. The
    statecraft plugin resumes past the same tear."""
    root = tmp_path / "torch"
    _fit_in_process(root, 2, io="torch")
    last, intact = root / "ckpts" / "last.ckpt", root / "ckpts" / "epoch=1-step=8.ckpt"
    assert last.is_file()
    assert intact.is_file()
    size = last.stat().st_size
    os.truncate(last, size // 2)
    torch.load(intact, weights_only=False)  # the intact one loads
    import pytorch_lightning as pl

    pl.seed_everything(0, verbose=False)
    trainer = build_trainer(str(root), 3, io="torch")
    with pytest.raises((RuntimeError, OSError)):  # torch's zip reader on the torn file
        trainer.fit(build_module(), ckpt_path="last")
    assert trainer.ckpt_path == str(last)  # Lightning chose the torn file

    root = tmp_path / "statecraft"
    _fit_in_process(root, 2, io="statecraft")
    last = root / "ckpts" / "last.ckpt"
    slots = root / "ckpts" / SLOTS_DIR
    (committed,) = generation_units(LocalStore(str(slots)), "last.ckpt")
    torn = slots / "last.ckpt" / "g00000099"
    torn.mkdir()
    raw = (slots / committed / "checkpoint.pt").read_bytes()
    (torn / "checkpoint.pt").write_bytes(raw[: len(raw) // 2])
    _, trainer = _fit_in_process(root, 3, io="statecraft", ckpt_path="last")
    assert trainer.ckpt_path == str(last)
    assert trainer.global_step == 3 * BATCHES


def _slurm_env(stub_dir: Path, record: Path) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "train",
        "SLURM_NTASKS": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "127.0.0.1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29517",
        "SCONTROL_RECORD": str(record),
        "PATH": f"{stub_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


@pytest.mark.usefixtures("torch_determinism_restored")
def test_slurm_sigusr1_saves_a_committed_hpc_checkpoint_and_requeues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a (fake) SLURM job Lightning's signal connector owns SIGUSR1: a real SIGUSR1
    to a training process saves hpc_ckpt_1.ckpt through the plugin (committed) and runs
    `scontrol requeue <job>`; the requeued job (SLURM env, no ckpt_path) resumes from it."""
    stub_dir, record = tmp_path / "bin", tmp_path / "scontrol.args"
    stub_dir.mkdir()
    stub = stub_dir / "scontrol"
    stub.write_text('#!/bin/sh\necho "$@" >> "$SCONTROL_RECORD"\n')
    stub.chmod(0o755)
    slurm = _slurm_env(stub_dir, record)
    root = tmp_path / "job"
    child = _launch("--root", str(root), "--epochs", "1000", "--slurm-sleep", "0.02",
                    env=_env(**slurm))  # fmt: skip
    _wait_for(root / "running", child, "training started")
    child.send_signal(signal.SIGUSR1)
    _wait_for(record, child, "scontrol requeue ran", timeout=30)
    assert record.read_text().split() == ["requeue", "4242"]
    _kill(child)  # what SLURM does to the requeued job
    hpc = root / "hpc_ckpt_1.ckpt"
    verdict = verify_unit(LocalStore(str(root / SLOTS_DIR)), f"{hpc.name}/g00000001")
    assert verdict.committed, verdict.reason
    assert verdict.manifest is not None
    saved = torch.load(committed_checkpoint_file(hpc), weights_only=False)
    assert saved["global_step"] == verdict.manifest.step

    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    import pytorch_lightning as pl

    seen: dict[str, Any] = {}

    class Capture(pl.Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            seen["step"] = trainer.global_step
            seen["state"] = {k: v.clone() for k, v in module.state_dict().items()}

    pl.seed_everything(0, verbose=False)
    trainer = build_trainer(str(root), saved["epoch"] + 1, io="statecraft")
    trainer.callbacks.append(Capture())
    trainer.fit(build_module())
    assert trainer.ckpt_path == str(hpc)
    assert seen["step"] == saved["global_step"]
    assert _tensors_equal(saved["state_dict"], seen["state"]) == []


def test_the_plugin_installs_no_signal_handler() -> None:
    """Building the plugin leaves every termination signal's handler as it was: under SLURM
    the requeue signal stays Lightning's."""
    before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    StatecraftCheckpointIO(async_save=True).teardown()
    assert {s: signal.getsignal(s) for s in before} == before
