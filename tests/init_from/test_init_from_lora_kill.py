"""A real ``peft`` LoRA DPO fine-tune of a tiny GPT-2 (built from a config, no download) started
with ``init_from`` a committed base run (``init_from_lora=true``: the adapters are target-only),
against a frozen reference, with a maintained EMA (``AveragedModel`` with
``get_ema_multi_avg_fn``) and asynchronous saves at every step, SIGKILLed by the parent right
after a step and relaunched with the unchanged command: every step's loss, the final weights
and the final EMA (``n_averaged`` included) are bit-identical to an uninterrupted run's (both in
child processes, one torch thread)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from init_from_models import base_run

pytestmark = pytest.mark.slow

STEPS = 6
CHILD = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.environ["INIT_FROM_TESTS"])
    import torch
    torch.set_num_threads(1)
    import statecraft as sc
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
    from init_from_models import dpo_loss, gpt2, lora, tokens

    out, base, steps, result = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    model = lora(gpt2(11))  # the raw experiment init, before init_from; adapters train
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))  # init_from loads it
    reference = gpt2(12).requires_grad_(False)  # rebuilt on every start; init_from loads it
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=5e-2
    )
    knobs = ["save_every=1", "quiet=true", f"init_from={base}", "init_from_lora=true"]
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, knobs), run="lora-dpo", output_root=out
    )
    ckpt.track(model=model, optimizer=optimizer, reference=reference, ema=ema)
    start = ckpt.resume()
    print("resumed", start.step, flush=True)
    for step in range(start.step, steps):
        loss = dpo_loss(model, reference, tokens(4, 100 + step), tokens(4, 200 + step))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
        print("step", step, loss.item().hex(), flush=True)
    ckpt.finalize()
    averaged = {"ema." + k: v for k, v in ema.state_dict().items()}
    torch.save({**model.state_dict(), **averaged}, result)
    print("done", flush=True)
    """
)


def _launch(script: Path, out: Path, base: Path, result: Path) -> subprocess.Popen[str]:
    here = Path(__file__).resolve().parent
    env = {**os.environ, "INIT_FROM_TESTS": str(here), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(here.parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, str(script), str(out), str(base), str(STEPS), str(result)]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _losses(lines: list[str]) -> dict[int, str]:
    return {int(w[1]): w[2] for w in (line.split() for line in lines) if w and w[0] == "step"}


def test_a_killed_lora_fine_tune_resumes_bit_exact(tmp_path: Path) -> None:
    base = base_run(tmp_path / "base")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    whole = _launch(script, tmp_path / "whole", base, tmp_path / "whole.pt")
    stdout, stderr = whole.communicate(timeout=600)
    assert whole.returncode == 0, stderr
    expected = _losses(stdout.splitlines())
    assert sorted(expected) == list(range(STEPS))

    killed = _launch(script, tmp_path / "split", base, tmp_path / "split.pt")
    assert killed.stdout is not None
    seen = []
    for line in killed.stdout:
        seen.append(line)
        if line.startswith("step 2 "):
            killed.send_signal(signal.SIGKILL)  # mid-run: step 3 computing or saving
            break
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    relaunched = _launch(script, tmp_path / "split", base, tmp_path / "split.pt")
    stdout, stderr = relaunched.communicate(timeout=600)
    assert relaunched.returncode == 0, stderr
    first = stdout.splitlines()[0].split()
    assert first[0] == "resumed"
    assert 1 <= int(first[1]) <= STEPS  # a committed checkpoint was adopted, not a fresh start
    losses = {**_losses(seen), **_losses(stdout.splitlines())}
    assert losses == expected
    got = torch.load(tmp_path / "split.pt", weights_only=True)
    want = torch.load(tmp_path / "whole.pt", weights_only=True)
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert int(got["ema.n_averaged"]) == STEPS  # advanced once per applied update, resumed
    lora_b = [k for k in got if ".lora_B." in k and not k.startswith("ema.")]
    assert lora_b
    assert not all(torch.equal(got["ema.module." + k], got[k]) for k in lora_b)
