"""A real ``SIGKILL`` of a ``Trainer.train`` child while ``checkpoint-N`` is being written.

One scenario: run A (in the test process, the reference) trains 10 steps uninterrupted; run B
(a child, ``tests/hf_runs.py``) trains the same steps and is killed inside the save of
``checkpoint-6``
(model and optimizer files written; RNG state, ``trainer_state.json`` and the commit manifest
not); run C (a fresh child) resumes B's directory from :func:`last_committed_checkpoint`
(``checkpoint-3``) and trains to the end. C's final weights, optimizer and scheduler state
must equal A's bit for bit.
The same partial directory also shows the default: ``get_last_checkpoint`` picks the partial
``checkpoint-6``, and resuming from it fails.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

import hf_runs
import torch

from statecraft.checkpoint.units import UNIT_MANIFEST_NAME

pytestmark = pytest.mark.slow

MAX_STEPS = 10
SAVE_STEPS = 3
KILL_AT = 6


def _spawn(out: Path, *extra: str, final: Path | None = None, log: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        str(hf_runs.SCRIPT),
        "--out",
        str(out),
        "--max-steps",
        str(MAX_STEPS),
        "--save-steps",
        str(SAVE_STEPS),
        *extra,
    ]
    if final is not None:
        command += ["--final", str(final)]
    handle = log.open("w")
    return subprocess.Popen(
        command, env=hf_runs.child_env(), stdout=handle, stderr=subprocess.STDOUT
    )


def _wait(proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    rc = proc.wait(timeout=timeout)
    assert rc == 0, f"child exited {rc}:\n{log.read_text()[-4000:]}"


def _assert_equal_states(got: dict[str, Any], want: dict[str, Any], where: str = "") -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), where
        assert got.dtype == want.dtype, where
        assert got.shape == want.shape, where
        assert torch.equal(got, want), f"tensor differs at {where}"
    elif isinstance(want, dict):
        assert set(got) == set(want), f"keys differ at {where}: {set(got) ^ set(want)}"
        for key in want:
            _assert_equal_states(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_equal_states(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Runs B (a child, killed mid-save of checkpoint-6) and C (a child that resumes B's
    directory once B is dead: it imports, then waits for the go file) while A (uninterrupted,
    the reference) trains in this process, so the imports overlap. After asserting the kill
    landed inside the save, a copy of B's directory as the kill left it is kept for the
    default-resolution test."""
    root = tmp_path_factory.mktemp("hf-kill")
    paths = {
        "a_out": root / "a",
        "b_out": root / "b",
        "b_snapshot": root / "b-as-killed",
        "a_final": root / "a_final.pt",
        "c_final": root / "c_final.pt",
        "marker": root / "in-save",
        "go": root / "go",
        "b_log": root / "b.log",
        "c_log": root / "c.log",
    }
    run_b = _spawn(
        paths["b_out"],
        "--hang-at",
        str(KILL_AT),
        "--marker",
        str(paths["marker"]),
        log=paths["b_log"],
    )
    run_c = _spawn(
        paths["b_out"],
        "--resume",
        "last-committed",
        "--wait-for",
        str(paths["go"]),
        final=paths["c_final"],
        log=paths["c_log"],
    )
    try:
        with hf_runs.one_thread():
            reference = hf_runs.make_trainer(
                str(paths["a_out"]), max_steps=MAX_STEPS, save_steps=SAVE_STEPS
            )
            reference.train()
        torch.save(hf_runs.final_state(reference), paths["a_final"])
        deadline = time.monotonic() + 90
        while not paths["marker"].exists():
            if run_b.poll() is not None:
                pytest.fail(
                    f"run B exited {run_b.returncode} before the save:\n"
                    f"{paths['b_log'].read_text()[-4000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail("run B never reached the save of checkpoint-6")
            time.sleep(0.02)
        partial = paths["b_out"] / f"checkpoint-{KILL_AT}"
        # the premise: the folder is being written, and is not committed
        assert partial.is_dir()
        assert (partial / "model.safetensors").is_file()
        assert (partial / "optimizer.pt").is_file()
        assert not (partial / "trainer_state.json").exists()
        assert not (partial / UNIT_MANIFEST_NAME).exists()
        assert (paths["b_out"] / f"checkpoint-{SAVE_STEPS}" / UNIT_MANIFEST_NAME).is_file()
        os.kill(run_b.pid, signal.SIGKILL)
        assert run_b.wait(timeout=30) == -signal.SIGKILL
        shutil.copytree(paths["b_out"], paths["b_snapshot"])
        paths["go"].write_text("go")
        _wait(run_c, paths["c_log"])
    finally:
        for proc in (run_b, run_c):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return paths


def test_default_get_last_checkpoint_picks_the_partial_folder(
    killed: dict[str, Path], tmp_path: Path
) -> None:
    """Without statecraft the Trainer's own resolution picks the killed ``checkpoint-6`` and
    resuming from it fails; ``last_committed_checkpoint`` passes it over with the reason."""
    from transformers.trainer_utils import get_last_checkpoint

    from statecraft.integrations.hf import last_committed_checkpoint

    copy = tmp_path / "b"
    shutil.copytree(killed["b_snapshot"], copy)
    picked = get_last_checkpoint(str(copy))
    assert picked == str(copy / f"checkpoint-{KILL_AT}")

    trainer = hf_runs.make_trainer(
        str(copy), max_steps=MAX_STEPS, save_steps=SAVE_STEPS, callback=False
    )
    with pytest.raises(FileNotFoundError, match=r"trainer_state\.json"):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 0  # it never trained from anything

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger("test_hf_kill.resolution")
    log.addHandler(Keep())
    assert last_committed_checkpoint(copy, log=log) == str(copy / f"checkpoint-{SAVE_STEPS}")
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert any(f"checkpoint-{KILL_AT}" in m and "manifest" in m for m in warnings), warnings


def test_resume_after_sigkill_is_bit_exact(killed: dict[str, Path]) -> None:
    """A fresh process resumes the killed directory from the last committed checkpoint,
    removes the partial folder, and ends with exactly the uninterrupted run's weights,
    optimizer and scheduler state."""
    final = killed["c_final"]
    text = killed["c_log"].read_text()
    assert f"resume={killed['b_out'] / f'checkpoint-{SAVE_STEPS}'}" in text
    assert f"removing {killed['b_out'] / f'checkpoint-{KILL_AT}'}" in text

    got = torch.load(final, weights_only=False)
    want = torch.load(killed["a_final"], weights_only=False)
    assert got["global_step"] == want["global_step"] == MAX_STEPS
    _assert_equal_states(got["model"], want["model"], "model")
    _assert_equal_states(got["optimizer"], want["optimizer"], "optimizer")
    _assert_equal_states(got["scheduler"], want["scheduler"], "scheduler")
    # and the checkpoint folders of the two runs agree from the resume point on
    for step in (KILL_AT, 9, MAX_STEPS):
        name = f"checkpoint-{step}"
        assert (killed["b_out"] / name / UNIT_MANIFEST_NAME).is_file(), name
        a_weights = (killed["a_out"] / name / "model.safetensors").read_bytes()
        assert (killed["b_out"] / name / "model.safetensors").read_bytes() == a_weights, name
