"""``init_from=s3://...``: an archived checkpoint (uploaded by a real run to the session's
SeaweedFS) is fetched by the archive's verified fetch into the stage and its weights loaded; a
stage damaged afterwards is re-verified and refused, never loaded."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch
from checkpoint_runs import Objects, open_checkpointer, train
from s3_server import BUCKET, S3Server

import statecraft as sc
from statecraft.errors import CheckpointCorruptError


@pytest.fixture(scope="module")
def archived(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """``(s3:// uri of iter_4, the run's final model.pt)`` of a run archived by upload."""
    out = tmp_path_factory.mktemp("archived")
    prefix = f"init-from-tests/{uuid.uuid4().hex[:10]}/checkpoints"
    ckpt, objects = open_checkpointer(
        out,
        "upload.enabled=true",
        f"upload.bucket={BUCKET}",
        f"upload.credentials={s3_server.credentials_file}",
        f"upload.prefix={prefix}",
    )
    ckpt.resume()
    train(ckpt, objects, 4)
    ckpt.finalize()
    ckpt.close()
    torch.save(objects.model.state_dict(), out / "final.pt")
    return f"s3://{BUCKET}/{prefix}/iter_000000004", out / "final.pt"


def test_the_knob_fetches_and_loads_an_archived_checkpoint(
    archived: tuple[str, Path], s3_server: S3Server, tmp_path: Path
) -> None:
    uri, final = archived
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(
            None, [f"init_from={uri}", f"upload.credentials={s3_server.credentials_file}"]
        ),
        run="tune",
        output_root=tmp_path,
    )
    objects = Objects()
    torch.nn.init.zeros_(objects.model.weight)
    ckpt.track(model=objects.model, optimizer=objects.optimizer)
    assert ckpt.resume().step == 0
    expected = torch.load(final, weights_only=True)
    assert all(torch.equal(objects.model.state_dict()[k], v) for k, v in expected.items())
    report = ckpt.init_report
    assert report is not None
    assert report.iteration == 4
    assert (tmp_path / ".init_from_stage" / "iter_000000004" / "model.pt").is_file()
    ckpt.close()


def test_a_damaged_stage_is_refused_not_loaded(
    archived: tuple[str, Path], s3_server: S3Server, tmp_path: Path
) -> None:
    uri, final = archived
    model = torch.nn.Linear(4, 3)
    credentials = str(s3_server.credentials_file)
    sc.init_from(model, uri, credentials=credentials, stage_dir=tmp_path)
    expected = torch.load(final, weights_only=True)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in expected.items())
    staged = tmp_path / "iter_000000004" / "model.pt"
    data = bytearray(staged.read_bytes())
    data[len(data) // 2] ^= 0x01
    staged.write_bytes(bytes(data))
    fresh = torch.nn.Linear(4, 3)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(CheckpointCorruptError):
        sc.init_from(fresh, uri, credentials=credentials, stage_dir=tmp_path)
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())
