"""The archive round trip end to end against the real S3 server: train with upload on, save
(each save archived, then retention prunes locally what is archived), fetch the archived
iteration back with ``statecraft archive fetch``, resume explicitly from the fetched copy, and
finish bit-for-bit where an uninterrupted run finishes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import torch
from checkpoint_runs import Objects, open_checkpointer, train
from s3_server import BUCKET, S3Server

from statecraft.cli import main

STEPS = 8


def _state(objects: Objects) -> dict:
    return {
        "model": objects.model.state_dict(),
        "optimizer": objects.optimizer.state_dict(),
        "scheduler": objects.scheduler.state_dict(),
        "cursor": objects.cursor.state_dict(),
    }


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_train_upload_prune_fetch_resume_is_bit_exact(
    s3_server: S3Server, tmp_path: Path, capsys
) -> None:
    """iter_2 is archived and pruned locally by keep_model_last=1; fetched back it resumes
    to exactly the state of an uninterrupted run."""
    pytest.importorskip("statecraft.checkpoint.archive.open")  # the upload wiring (H1)
    reference, ref_objects = open_checkpointer(tmp_path / "ref")
    reference.resume()
    train(reference, ref_objects, STEPS)
    reference.finalize()

    prefix = f"roundtrip/{uuid.uuid4().hex[:10]}/checkpoints"
    creds = str(s3_server.credentials_file)
    upload = [
        "upload.enabled=true",
        f"upload.bucket={BUCKET}",
        f"upload.credentials={creds}",
        f"upload.prefix={prefix}",
        "keep_model_last=1",
    ]
    ckpt, objects = open_checkpointer(tmp_path / "run", *upload)
    ckpt.resume()
    train(ckpt, objects, 4)  # saves 2 and 4, each uploaded; retention then prunes 2
    ckpt.close()
    local = list((tmp_path / "run").rglob("checkpoints/iter_*"))
    assert [p.name for p in local] == ["iter_000000004"], local

    code = main(
        [
            "archive", "fetch", "--artifact-uri", f"s3://{BUCKET}/{prefix}/iter_000000002",
            "--dst", str(tmp_path / "fetched"), "--credentials", creds, "--json",
        ]
    )  # fmt: skip
    envelope = json.loads(capsys.readouterr().out)
    assert code == 0, envelope
    assert envelope["data"]["kind"] == "checkpoint"
    fetched = Path(envelope["data"]["path"])

    resumed, resumed_objects = open_checkpointer(tmp_path / "resumed", f"resume={fetched}")
    result = resumed.resume()
    assert result.step == 2
    train(resumed, resumed_objects, STEPS - 2)
    resumed.finalize()
    assert _equal(_state(resumed_objects), _state(ref_objects))
