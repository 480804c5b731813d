"""``statecraft objects download | copy`` against the real S3 server: byte-exact, idempotent
(the second run transfers nothing), never overwriting a different file or object."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import BUCKET, S3Server

from statecraft.cli import main
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials

FILES = {"iter_000000002/model.pt": b"m" * 3000, "iter_000000002/.posttrain-manifest.json": b"{}"}


@pytest.fixture(autouse=True)
def no_secret_logged(caplog: pytest.LogCaptureFixture, s3_server: S3Server) -> Iterator[None]:
    """No log line of these tests (statecraft at DEBUG) holds the server's secret key."""
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="statecraft")
    yield
    leaked = [r.getMessage() for r in caplog.records if s3_server.secret_key in r.getMessage()]
    assert leaked == []


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server) -> S3Bucket:
    return S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)


@pytest.fixture
def source(bucket: S3Bucket) -> str:
    prefix = f"objects/{uuid.uuid4().hex[:10]}/checkpoints"
    for rel, data in FILES.items():
        bucket.put(f"{prefix}/{rel}", data)
    return prefix


def _run(capsys, s3_server: S3Server, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json", "--credentials", str(s3_server.credentials_file)])
    out, err = capsys.readouterr()
    assert s3_server.secret_key not in out + err
    return code, json.loads(out)


def test_download_is_exact_and_idempotent(capsys, s3_server, source, tmp_path: Path) -> None:
    """The tree lands byte for byte; a second run skips every file; a different local file
    is refused and kept."""
    uri = f"s3://{BUCKET}/{source}"
    code, env = _run(capsys, s3_server, "objects", "download", uri, str(tmp_path / "d"))
    assert code == 0, env
    assert env["data"]["transferred"] == 2
    for rel, data in FILES.items():
        assert (tmp_path / "d" / rel).read_bytes() == data
    code, env = _run(capsys, s3_server, "objects", "download", uri, str(tmp_path / "d"))
    assert code == 0
    assert env["data"]["transferred"] == 0
    assert env["data"]["skipped"] == 2
    (tmp_path / "d" / "iter_000000002" / "model.pt").write_bytes(b"mine")
    code, env = _run(capsys, s3_server, "objects", "download", uri, str(tmp_path / "d"))
    assert code == 1
    assert "is not the same" in env["errors"][0]["message"]
    assert (tmp_path / "d" / "iter_000000002" / "model.pt").read_bytes() == b"mine"


def test_copy_is_exact_and_idempotent(capsys, s3_server, bucket, source) -> None:
    """Objects are copied by streaming with their sha256; a second run copies nothing; a
    different object at the destination is refused before anything is copied."""
    src, dst = f"s3://{BUCKET}/{source}", f"s3://{BUCKET}/{source}-copy"
    code, env = _run(capsys, s3_server, "objects", "copy", src, dst)
    assert code == 0, env
    assert env["data"]["transferred"] == 2
    for rel, data in FILES.items():
        assert bucket.get(f"{source}-copy/{rel}") == data
        assert bucket.stat(f"{source}-copy/{rel}").sha256 == bucket.stat(f"{source}/{rel}").sha256
    code, env = _run(capsys, s3_server, "objects", "copy", src, dst)
    assert code == 0
    assert env["data"]["transferred"] == 0
    assert env["data"]["skipped"] == 2
    bucket.put(f"{source}-other/iter_000000002/model.pt", b"different")
    code, env = _run(capsys, s3_server, "objects", "copy", src, f"s3://{BUCKET}/{source}-other")
    assert code == 1
    assert "is not the same" in env["errors"][0]["message"]
    assert bucket.stat(f"{source}-other/iter_000000002/.posttrain-manifest.json") is None


def test_progress_bar_draws_on_a_terminal_only() -> None:
    """The bar rewrites one line per file when enabled and writes nothing otherwise."""
    import io

    from statecraft.cli.progress import Progress

    stream = io.StringIO()
    bar = Progress("fetch", total_files=2, enabled=True, stream=stream)
    bar("model.pt", 2 << 20)
    bar("optim.pt", 1 << 20)
    bar.close()
    assert "\rfetch: 2/2 files, 3.0 MiB  optim.pt" in stream.getvalue()
    assert stream.getvalue().endswith("\n")
    quiet = io.StringIO()
    Progress("fetch", stream=quiet)("model.pt", 1)  # StringIO is not a TTY
    assert quiet.getvalue() == ""
