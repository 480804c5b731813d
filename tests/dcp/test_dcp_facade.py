"""``checkpoint_format=dcp`` through the Checkpointer, one process: the layout, a resume that
continues bit-exact against an uninterrupted run, and bad input (a truncated or bit-flipped
shard, a missing .metadata, a manifest naming a missing shard) passed over by resume=auto
with the reason, or refused by an explicit resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import statecraft as sc
from statecraft.errors import CheckpointCorruptError, NotSupportedYetError
from tests.checkpoint_runs import Objects, open_checkpointer, train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

DCP = ("checkpoint_format=dcp",)


def _iter_dir(out: Path, iteration: int) -> Path:
    found = sorted(out.glob(f"**/checkpoints/iter_{iteration:09d}"))
    assert len(found) == 1, found
    return found[0]


def _run(out: Path, steps: int, *extra: str) -> tuple[sc.Checkpointer, Objects]:
    ckpt, objects = open_checkpointer(out, *DCP, *extra)
    start = ckpt.resume()
    train(ckpt, objects, steps - start.step)
    return ckpt, objects


def _same(a: Objects, b: Objects) -> None:
    for key, value in a.model.state_dict().items():
        assert torch.equal(value, b.model.state_dict()[key]), key
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for pid, state in sa["state"].items():
        for k, v in state.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(sb["state"][pid][k])), (pid, k)
    assert a.scheduler.state_dict() == b.scheduler.state_dict()
    assert a.cursor.position == b.cursor.position


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DCP run with iterations 2 and 4 committed."""
    out = tmp_path_factory.mktemp("dcp")
    ckpt, _ = _run(out, 4)
    ckpt.finalize()
    return out


def test_layout_and_manifest(committed: Path) -> None:
    it = _iter_dir(committed, 4)
    names = sorted(str(p.relative_to(it)) for p in it.rglob("*") if p.is_file())
    assert names == [
        ".posttrain-manifest.json",
        "data.pt",
        "model/.metadata",
        "model/__0_0.distcp",
        "optim/.metadata",
        "optim/__0_0.distcp",
        "trainer.pt",
    ]
    manifest = json.loads((it / ".posttrain-manifest.json").read_text())
    assert manifest["format"] == "dcp"
    assert sorted(manifest["files"]) == names[1:]
    for name, entry in manifest["files"].items():
        assert (it / name).stat().st_size == entry["size"]
    latest = next(committed.glob("**/checkpoints/latest_checkpoint.txt"))
    assert latest.read_text().strip() == "iter_000000004"


def test_resume_is_bit_exact(tmp_path: Path) -> None:
    """Train 6 steps straight; or 4, stop, resume from iter 4 and train 2 more: same state."""
    _, straight = _run(tmp_path / "a", 6, "save_every=0")
    first, _ = _run(tmp_path / "b", 4)
    first.finalize()
    first.close()
    ckpt, resumed = open_checkpointer(tmp_path / "b", *DCP)
    # a fresh model whose weights differ: the resume must overwrite them
    with torch.no_grad():
        resumed.model.weight.add_(1.0)
    start = ckpt.resume()
    assert start.step == 4
    train(ckpt, resumed, 2)  # its data comes from the RNG state resume restored
    ckpt.finalize()
    _same(straight, resumed)


def _copy(committed: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(committed, out)
    return out


def _resume_auto(out: Path) -> sc.ResumeResult:
    ckpt, _ = open_checkpointer(out, *DCP)
    return ckpt.resume()


def _damage_cases() -> dict[str, object]:
    def truncate(it: Path) -> None:
        shard = it / "model/__0_0.distcp"
        shard.write_bytes(shard.read_bytes()[:-10])

    def flip(it: Path) -> None:
        shard = it / "optim/__0_0.distcp"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x04
        shard.write_bytes(bytes(data))

    def no_metadata(it: Path) -> None:
        (it / "model/.metadata").unlink()

    def missing_shard(it: Path) -> None:
        (it / "optim/__0_0.distcp").unlink()

    return {
        "truncated": (truncate, "model/__0_0.distcp"),
        "bit-flip": (flip, "optim/__0_0.distcp"),
        "no-metadata": (no_metadata, "model/.metadata"),
        "missing-shard": (missing_shard, "optim/__0_0.distcp"),
    }


@pytest.mark.parametrize("case", sorted(_damage_cases()))
def test_damaged_newest_is_passed_over(committed: Path, tmp_path: Path, case: str) -> None:
    damage, culprit = _damage_cases()[case]  # type: ignore[misc]
    out = _copy(committed, tmp_path)
    damage(_iter_dir(out, 4))
    result = _resume_auto(out)
    assert result.step == 2
    assert [p.name for p in result.passed_over] == ["iter_000000004"]
    assert culprit in result.passed_over[0].reason
    # an explicit resume of the damaged iteration is refused naming the file
    ckpt, _ = open_checkpointer(out, *DCP, f"resume={_iter_dir(out, 4)}")
    with pytest.raises(CheckpointCorruptError, match=culprit.replace(".", r"\.")):
        ckpt.resume()


def test_retention_prunes_dcp_optimizer_directories(tmp_path: Path) -> None:
    """keep_optim_last=1 with DCP: older iterations lose their optim/ directory (weights-only,
    marker first), the newest keeps it, and resume=auto adopts the newest."""
    ckpt, _ = _run(tmp_path, 6, "keep_optim_last=1")
    ckpt.finalize()
    for iteration in (2, 4):
        it = _iter_dir(tmp_path, iteration)
        assert not (it / "optim").exists(), iteration
        assert (it / ".retention-weights-only.json").exists()
        assert (it / "model/.metadata").exists()
    assert (_iter_dir(tmp_path, 6) / "optim/.metadata").exists()
    ckpt.close()
    assert _resume_auto(tmp_path).step == 6


def test_emergency_stop_writes_a_dcp_checkpoint(tmp_path: Path) -> None:
    """A stop request (sentinel) in a DCP run writes the emergency save as a DCP checkpoint,
    which resume=auto then adopts."""
    sentinels = tmp_path / "sentinels"
    sentinels.mkdir()
    out = tmp_path / "out"
    ckpt, objects = open_checkpointer(out, *DCP, f"termination.sentinel_dir={sentinels}")
    ckpt.resume()
    train(ckpt, objects, 3)
    (sentinels / "SIGUSR1_RECEIVED").touch()
    objects.step()
    ckpt.record(sc.Outcome.APPLIED)
    assert ckpt.step_end()
    assert ckpt.stopped
    it = _iter_dir(out, 4)
    manifest = json.loads((it / ".posttrain-manifest.json").read_text())
    assert manifest["format"] == "dcp"
    ckpt.close()
    assert _resume_auto(out).step == 4


def test_durable_validation_with_dcp_is_refused(tmp_path: Path) -> None:
    """validation.save_checkpoint=true with DCP is refused up front, naming the knob."""
    with pytest.raises(NotSupportedYetError, match=r"validation\.save_checkpoint"):
        open_checkpointer(tmp_path, *DCP, "validation.save_checkpoint=true")


def test_a_checkpoint_of_another_model_is_refused_and_nothing_changes(
    committed: Path, tmp_path: Path
) -> None:
    """Resuming a DCP checkpoint into a model of other shapes fails closed: ResumeError naming
    the component, and the live model and optimizer are exactly as they were."""
    out = _copy(committed, tmp_path)
    ckpt, _ = open_checkpointer(out, *DCP)
    torch.manual_seed(3)
    wider = torch.nn.Linear(4, 5)
    optimizer = torch.optim.AdamW(wider.parameters(), lr=0.01)
    ckpt.tracked.model, ckpt.tracked.optimizer = wider, optimizer
    ckpt.tracked.scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    before = {k: v.clone() for k, v in wider.state_dict().items()}
    with pytest.raises(sc.errors.ResumeError, match=r"model: does not fit the tracked objects"):
        ckpt.resume()
    for key, value in wider.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert optimizer.state_dict()["state"] == {}


def test_upload_archives_the_dcp_tree(tmp_path: Path, s3_server: Any) -> None:
    """upload.enabled with DCP: after each durable save rank 0 uploads the whole iteration
    (every shard, both .metadata, control files, manifest) byte for byte."""
    import uuid

    from s3_server import BUCKET

    prefix = f"dcp-upload/{uuid.uuid4().hex[:10]}/checkpoints"
    knobs = [
        "upload.enabled=true",
        f"upload.bucket={BUCKET}",
        f"upload.credentials={s3_server.credentials_file}",
        f"upload.prefix={prefix}",
    ]
    ckpt, _ = _run(tmp_path, 2, *knobs)
    ckpt.finalize()
    ckpt.close()
    assert ckpt.saves[-1].upload_error is None
    client = s3_server.client()
    it = _iter_dir(tmp_path, 2)
    base = f"{prefix}/iter_000000002/"
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=base).get("Contents", [])
    remote = {o["Key"][len(base) :] for o in listed}
    local = {str(p.relative_to(it)) for p in it.rglob("*") if p.is_file()} - {".uploaded"}
    assert local <= remote
    for name in local:
        body = client.get_object(Bucket=BUCKET, Key=base + name)["Body"].read()
        assert body == (it / name).read_bytes(), name
