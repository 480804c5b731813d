"""``statecraft archive publish --upload-prefix P`` writes under ``P`` exactly as given (issue 28
item 6), against the real S3 server: a prefix ending in ``checkpoints`` is not rewritten to its
sibling ``checkpoint_artifacts``; nothing lands outside ``P``; ``--help`` states the rule."""

from __future__ import annotations

import json
import uuid

import pytest
from fetch_trees import make_artifact
from s3_server import BUCKET, S3Server

from statecraft.cli import main
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials


def _publish(capsys, s3_server: S3Server, artifact, prefix: str) -> dict:
    code = main(
        [
            "archive", "publish", "--artifact-dir", str(artifact), "--upload-prefix", prefix,
            "--credentials", str(s3_server.credentials_file), "--json",
        ]
    )  # fmt: skip
    envelope = json.loads(capsys.readouterr().out)
    assert code == 0, envelope
    return envelope["data"]


@pytest.mark.parametrize("tail", ["checkpoints", "exports/custom"])
def test_publish_writes_under_the_prefix_as_given(capsys, s3_server, tmp_path, tail):
    """Every object the publish wrote is under ``P/checkpoint_artifacts/iter_N/``; the sibling
    of a ``.../checkpoints`` prefix stays empty."""
    pytest.importorskip("statecraft.checkpoint.archive.publish_bindings")
    artifact = make_artifact(tmp_path / "run")
    base = f"asgiven/{uuid.uuid4().hex[:10]}"
    prefix = f"{base}/{tail}"
    data = _publish(capsys, s3_server, artifact, f"s3://{BUCKET}/{prefix}")
    expected = f"{prefix}/checkpoint_artifacts/{artifact.name}"
    assert data["remote_prefix"] == expected
    assert data["uri"] == f"s3://{BUCKET}/{expected}"
    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    keys = bucket.list(f"{base}/")
    assert keys, "the publish wrote nothing"
    assert all(key.startswith(f"{expected}/") for key in keys), keys
    assert bucket.list(f"{base}/checkpoint_artifacts/") == []


def test_bare_prefix_with_bucket_is_the_same_place(capsys, s3_server, tmp_path):
    """``--bucket B --upload-prefix P`` and ``--upload-prefix s3://B/P`` name one place."""
    pytest.importorskip("statecraft.checkpoint.archive.publish_bindings")
    artifact = make_artifact(tmp_path / "run")
    prefix = f"asgiven/{uuid.uuid4().hex[:10]}/checkpoints"
    code = main(
        [
            "archive", "publish", "--artifact-dir", str(artifact), "--upload-prefix",
            f"/{prefix}/", "--bucket", BUCKET, "--credentials",
            str(s3_server.credentials_file), "--json",
        ]
    )  # fmt: skip
    data = json.loads(capsys.readouterr().out)["data"]
    assert code == 0
    assert data["remote_prefix"] == f"{prefix}/checkpoint_artifacts/{artifact.name}"


def test_help_states_the_rule(capsys):
    with pytest.raises(SystemExit):
        main(["archive", "publish", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "<prefix>/checkpoint_artifacts/iter_N/" in text
    assert "never a sibling" in text
