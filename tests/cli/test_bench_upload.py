"""``statecraft bench upload`` against the session's real SeaweedFS: the envelope's shape at a
tiny size, every figure positive, nothing left behind in the bucket or the scratch directory,
and the clear errors of a missing credentials file. No speed is asserted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from bench_runs import ENVELOPE_KEYS, bench_json, positive
from s3_server import BUCKET, S3Server

from statecraft.cli.bench.upload import format_upload

SIDES = ("upload_statecraft", "upload_boto3", "fetch_statecraft", "fetch_boto3")


@pytest.fixture(scope="module")
def upload_run(
    s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, dict[str, Any], Path]:
    """One ``bench upload --size-mb 8 --repeat 2 --json`` run against the session server."""
    where = tmp_path_factory.mktemp("bench-upload")
    return bench_json(
        where,
        "upload",
        "--size-mb",
        "8",
        "--repeat",
        "2",
        "--credentials",
        str(s3_server.credentials_file),
        "--bucket",
        BUCKET,
    )


class TestBenchUpload:
    def test_envelope_has_positive_figures(self, upload_run: tuple[int, dict, Path]) -> None:
        """Exit 0, the envelope keys, both rounds of all four sides timed, every median,
        rate and ratio positive, the given service used (nothing started)."""
        code, envelope, _ = upload_run
        assert code == 0
        assert set(envelope) == ENVELOPE_KEYS
        assert envelope["command"] == "bench upload"
        assert envelope["status"] == "ok"
        data = envelope["data"]
        assert data["service"]["how"] == "given"
        assert data["files"] >= 3
        assert data["bytes"] >= 8 << 20
        for side in SIDES:
            assert len(data["samples"][side]) == 2
            assert all(positive(s) for s in data["samples"][side])
            assert positive(data["seconds"][side])
            assert positive(data["gb_per_s"][side])
        assert positive(data["ratios"]["upload_vs_boto3"])
        assert positive(data["ratios"]["fetch_vs_boto3"])
        assert data["transfer"] == {"part_size": 8 << 20, "concurrency": 10}
        assert data["statecraft"]["upload"] == "upload_checkpoint"
        assert data["statecraft"]["fetch"] in ("fetch_archive", "download_into (stand-in)")
        assert "upload" in format_upload(data)
        assert "fetch" in format_upload(data)

    def test_no_secret_no_leftovers(
        self, upload_run: tuple[int, dict, Path], s3_server: S3Server
    ) -> None:
        """The output never holds the secret key; the bench deleted every object it wrote
        and its scratch directory."""
        _, envelope, where = upload_run
        assert s3_server.secret_key not in str(envelope)
        listed = s3_server.client().list_objects_v2(
            Bucket=BUCKET, Prefix="statecraft-bench-upload/"
        )
        assert listed.get("KeyCount", 0) == 0
        assert os.listdir(where) == []

    def test_endpoint_without_credentials_is_a_clear_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--endpoint without --credentials or $STATECRAFT_S3_CREDENTIALS names both."""
        monkeypatch.delenv("STATECRAFT_S3_CREDENTIALS", raising=False)
        code, envelope, _ = bench_json(
            tmp_path, "upload", "--size-mb", "1", "--endpoint", "http://127.0.0.1:1"
        )
        assert code != 0
        assert envelope["status"] == "error"
        text = str(envelope["errors"])
        assert "--credentials" in text
        assert "STATECRAFT_S3_CREDENTIALS" in text
