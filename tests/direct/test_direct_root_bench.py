"""The S3 part of ``statecraft bench dcp`` (statecraft.cli.bench.dcp_s3.bench_direct_s3)
against the real S3 server: the result's shape, that both sides wrote the same objects and
that everything is deleted afterwards. No speed is asserted."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from s3_server import BUCKET, S3Server

from statecraft.cli.bench.dcp_s3 import bench_direct_s3, format_direct_s3
from statecraft.errors import ConfigError
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials


def test_shape_and_cleanup(s3_server: S3Server, tmp_path: Path) -> None:
    files = []
    for rank, size in ((0, 3 << 20), (1, 9 << 20)):  # one single PUT, one above a part
        path = tmp_path / "model" / f"__{rank}_0.distcp"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(os.urandom(size))
        files.append(path)
    (tmp_path / "optim").mkdir()
    (tmp_path / "optim" / ".metadata").write_bytes(b"m" * 100)
    files.append(tmp_path / "optim" / ".metadata")
    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    prefix = f"bench-dcp-test-{uuid.uuid4().hex[:8]}"
    result = bench_direct_s3(files, bucket, repeat=2, workers=2, prefix=prefix)
    assert result["files"] == 3
    assert result["bytes"] == (12 << 20) + 100
    assert len(result["samples"]["statecraft"]) == 2
    assert len(result["samples"]["boto3"]) == 2
    assert result["ratio"] == result["seconds"]["boto3"] / result["seconds"]["statecraft"]
    assert result["target"] == 0.9
    assert "x boto3 (target >= 0.9)" in format_direct_s3(result)
    assert bucket.list(prefix + "/") == []


def test_bad_input(s3_server: S3Server, tmp_path: Path) -> None:
    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    with pytest.raises(ConfigError, match="at least one file"):
        bench_direct_s3([], bucket)
    with pytest.raises(ConfigError, match="an existing file"):
        bench_direct_s3([tmp_path / "nope"], bucket)
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(ConfigError, match="a positive integer"):
        bench_direct_s3([tmp_path / "f"], bucket, workers=0)
