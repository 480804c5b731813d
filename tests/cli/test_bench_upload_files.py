"""``statecraft bench upload --files N``: the same archive upload and fetch against boto3 with
the checkpoint's bytes spread over N files (the "200 files of 1 MiB" case of issue 28 item 2),
against the session's real SeaweedFS, at a tiny size. No speed is asserted."""

from __future__ import annotations

import os
from pathlib import Path

from bench_runs import bench_json, positive
from s3_server import BUCKET, S3Server


def test_files_spreads_the_bytes_over_that_many_objects(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """--files 12 --size-mb 3: every side timed over the checkpoint's own files plus 12 shards
    of 256 KiB; nothing is left in the bucket."""
    code, envelope, where = bench_json(
        tmp_path, "upload", "--files", "12", "--size-mb", "3", "--repeat", "2",
        "--credentials", str(s3_server.credentials_file), "--bucket", BUCKET,
    )  # fmt: skip
    assert code == 0, envelope["errors"]
    data = envelope["data"]
    assert data["files"] >= 12 + 3  # the shards and the checkpoint's own files
    assert data["bytes"] >= 3 << 20
    assert data["statecraft"]["upload"] == "upload_checkpoint"
    for side in ("upload_statecraft", "upload_boto3", "fetch_statecraft", "fetch_boto3"):
        assert len(data["samples"][side]) == 2
        assert positive(data["seconds"][side])
    listed = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix="statecraft-bench-upload/")
    assert listed.get("KeyCount", 0) == 0
    assert os.listdir(where) == []  # the scratch directory is gone too


def test_files_must_be_positive(tmp_path: Path) -> None:
    """--files -1 is refused, naming the flag."""
    code, envelope, _ = bench_json(tmp_path, "upload", "--files", "-1", "--size-mb", "1")
    assert code != 0
    assert "--files" in str(envelope["errors"])
