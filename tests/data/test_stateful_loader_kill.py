"""A real training process fed by a ``torchdata`` ``StatefulDataLoader`` (two workers, a
shuffled sampler with a seeded generator), SIGKILLed mid-epoch and relaunched with the same
command under ``data.cursor_resume=strict``: every batch the relaunches consume is the batch an
uninterrupted run consumed at that step, and the final weights are bit-identical."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchdata.stateful_dataloader")

pytestmark = pytest.mark.slow

ITEMS, BATCH, EPOCHS = 48, 4, 2  # 12 batches an epoch, 24 steps
STEPS = ITEMS // BATCH * EPOCHS
KILL_AFTER = (5, 17)  # mid-epoch 0 and mid-epoch 1
CHILD = textwrap.dedent(
    """
    import sys
    import torch
    import statecraft as sc
    from statecraft.checkpoint.data import DataIdentity
    from torchdata.stateful_dataloader import StatefulDataLoader

    out, log, result = sys.argv[1], sys.argv[2], sys.argv[3]
    ITEMS, BATCH, EPOCHS = 48, 4, 2

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return ITEMS

        def __getitem__(self, index):
            x = torch.arange(4, dtype=torch.float32) * 0.01 * (index + 1)
            return index, x, torch.tensor([float(index % 7)])

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator()
    generator.manual_seed(1234)
    loader = StatefulDataLoader(Items(), batch_size=BATCH, shuffle=True, num_workers=2,
                                generator=generator)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["save_every=1", "save_async=false", "quiet=true",
                                        "data.cursor_resume=strict"]),
        run=sc.RunIdentity("proj", "group", "loader"),
        output_root=out,
    )
    ckpt.track(model=model, optimizer=optimizer, data=loader,
               data_identity=DataIdentity(grad_accum=1))
    start = ckpt.resume()
    print("resumed", start.step, start.data, flush=True)
    epoch = ckpt.loop_state.get("epoch", 0)
    with open(log, "a") as batches:
        while epoch < EPOCHS:
            for done, (ids, x, y) in enumerate(loader, start=1):
                loss = ((model(x) - y) ** 2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                batches.write(f"{ckpt.step + 1} {' '.join(map(str, ids.tolist()))}\\n")
                batches.flush()
                ckpt.record(sc.Outcome.APPLIED)
                # the epoch a resume continues: the next one once this batch ended the epoch
                ckpt.loop_state["epoch"] = epoch + (done == len(loader))
                ckpt.step_end()
                print("step", ckpt.step, flush=True)
            epoch += 1
    ckpt.finalize()
    torch.save({"model": model.state_dict(), "step": ckpt.step}, result)
    print("done", ckpt.step, flush=True)
    """
)


def _launch(script: Path, out: Path, log: Path, result: Path) -> subprocess.Popen[str]:
    root = str(Path(__file__).resolve().parents[2])  # this checkout's statecraft
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, str(script), str(out), str(log), str(result)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        start_new_session=True,  # its own process group: the kill takes its workers too
    )


def _batches(log: Path) -> list[tuple[int, list[int]]]:
    rows = []
    for line in log.read_text().splitlines():
        step, *ids = map(int, line.split())
        rows.append((step, ids))
    return rows


def test_sigkill_mid_epoch_resumes_at_the_exact_next_batch(tmp_path: Path) -> None:
    """Two SIGKILLs mid-epoch (one in each epoch): each relaunch restores the loader's cursor
    (``data == "restored"`` under strict), its first batch is the step after the one it
    resumed from, every batch it consumes equals the uninterrupted run's batch at that step,
    and the final weights are bit-identical."""
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    reference = _launch(script, tmp_path / "ref", tmp_path / "ref.log", tmp_path / "ref.pt")
    _, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err
    expected = dict(_batches(tmp_path / "ref.log"))
    assert sorted(expected) == list(range(1, STEPS + 1))
    epoch0 = sorted(i for s, ids in expected.items() if s <= STEPS // EPOCHS for i in ids)
    assert epoch0 == list(range(ITEMS))  # the loader really walks a shuffled epoch
    assert [expected[s] for s in range(1, 4)] != [sorted(expected[s]) for s in range(1, 4)]

    out, result = tmp_path / "killed", tmp_path / "killed.pt"
    resumed_at: list[tuple[int, str]] = []
    for launch, kill_after in enumerate((*KILL_AFTER, None)):
        log = tmp_path / f"launch{launch}.log"
        child = _launch(script, out, log, result)
        assert child.stdout is not None
        first = child.stdout.readline().split()
        assert first[:1] == ["resumed"], (first, child.stderr.read() if child.stderr else "")
        resumed_at.append((int(first[1]), first[2]))
        if kill_after is not None:
            for line in child.stdout:
                if line.split() == ["step", str(kill_after)]:
                    break
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate(timeout=60)
            assert child.returncode == -signal.SIGKILL
        else:
            _, err = child.communicate(timeout=600)
            assert child.returncode == 0, err
        consumed = _batches(log)
        start = resumed_at[-1][0]
        assert consumed, f"launch {launch} consumed no batch"
        assert consumed[0][0] == start + 1, (launch, consumed[0], start)
        for step, ids in consumed:
            assert ids == expected[step], (launch, step, ids, expected[step])

    assert resumed_at[0] == (0, "fresh")
    for (step, data), kill_after in zip(resumed_at[1:], KILL_AFTER, strict=True):
        assert step >= kill_after  # the save of the step printed last was committed
        assert step < STEPS // EPOCHS * (1 + (kill_after > STEPS // EPOCHS))  # mid-epoch
        assert data == "restored"
    want = torch.load(tmp_path / "ref.pt", weights_only=True)
    got = torch.load(result, weights_only=True)
    assert got["step"] == want["step"] == STEPS
    for key, value in want["model"].items():
        assert torch.equal(got["model"][key], value), key
