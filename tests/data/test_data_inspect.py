"""``statecraft inspect`` shows each iteration's data cursor: the ``data.cursor_resume`` mode
it was saved under, the source kind, the short fingerprint, the world size and whether the
cursor is exact-capable; a v1 ``data.pt`` says it recorded no identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.data import JsonlDataset
from statecraft.checkpoint.state import DATA_STATE_V1
from statecraft.cli import main


class Cursor:
    def __init__(self, dataset: Any) -> None:
        self.dataset, self.position = dataset, 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = state["position"]


def _run(out: Path, data: Any, mode: str) -> Path:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(
            None, ["save_every=1", "save_async=false", f"data.cursor_resume={mode}"]
        ),
        run=sc.RunIdentity("p", "g", "inspect"),
        output_root=out,
    )
    ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data=data)
    ckpt.resume()
    ckpt.record(sc.Outcome.APPLIED)
    ckpt.step_end()
    ckpt.close()
    assert ckpt.attempt is not None
    return Path(ckpt.attempt.checkpoints_dir)


def _inspect(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[dict[str, Any], str]:
    assert main(["inspect", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(["inspect", str(path)]) == 0
    return data, capsys.readouterr().out


def _iteration(report: dict[str, Any]) -> dict[str, Any]:
    [attempt] = report["data"]["attempts"]
    [it] = attempt["checkpoints"]["iterations"]
    return it


def test_an_exact_cursor_with_a_fingerprint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n')
    dataset = JsonlDataset(tmp_path / "a.jsonl")
    checkpoints = _run(tmp_path / "out", Cursor(dataset), "strict")
    report, text = _inspect(capsys, checkpoints)
    short = dataset.fingerprint().short
    assert _iteration(report)["data"] == {
        "mode": "strict",
        "kind": "state_dict",
        "fingerprint": short,
        "world_size": 1,
        "exact": True,
        "detail": f"cursor_resume=strict, state_dict, fingerprint {short}, world size 1, "
        "exact-capable: yes",
    }
    assert f"data: cursor_resume=strict, state_dict, fingerprint {short}" in text


def test_a_plain_loader_is_not_exact_capable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
    checkpoints = _run(tmp_path / "out", loader, "auto")
    report, text = _inspect(capsys, checkpoints)
    data = _iteration(report)["data"]
    assert (data["mode"], data["kind"], data["exact"], data["fingerprint"]) == (
        "auto",
        "no_cursor",
        False,
        None,
    )
    assert "fingerprint (none declared), world size 1, exact-capable: no" in text


def test_a_v1_data_pt_recorded_no_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An earlier data.pt (v1) reads, and says it has no identity."""
    (tmp_path / "a.jsonl").write_text('{"text": "a"}\n')
    checkpoints = _run(tmp_path / "out", Cursor(JsonlDataset(tmp_path / "a.jsonl")), "auto")
    v1 = {"schema": DATA_STATE_V1, "world_size": 1, "ranks": [{"position": 0}]}
    path = checkpoints / "iter_000000001" / "data.pt"
    torch.save(v1, path)
    report, _ = _inspect(capsys, checkpoints)
    data = _iteration(report)["data"]
    assert data["detail"] == "v1 data.pt: no source identity recorded (world size 1)"
    assert data["exact"] is None
