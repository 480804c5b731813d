"""``statecraft archive fetch | prune-verified`` (and publish's argument checks) against the real
S3 server: --json envelopes, exit codes, clear errors for bad input, nothing local deleted, and
the secret key in no output."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fetch_trees import archive, make_artifact, make_checkpoint, mark, tree
from s3_server import BUCKET, S3Server, free_ports

from statecraft.cli import main
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials


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


@pytest.fixture(scope="module")
def archived(bucket: S3Bucket, tmp_path_factory: pytest.TempPathFactory):
    """An artifact and a checkpoint archived under a fresh prefix."""
    run = tmp_path_factory.mktemp("cli-src") / "run"
    base = f"cli/{uuid.uuid4().hex[:10]}/run"
    artifact, checkpoint = make_artifact(run), make_checkpoint(run)
    a_key = f"{base}/checkpoint_artifacts/{artifact.name}"
    c_key = f"{base}/checkpoints/{checkpoint.name}"
    entries = archive(bucket, artifact, a_key)
    archive(bucket, checkpoint, c_key)
    return artifact, checkpoint, a_key, c_key, entries


def _run(capsys, s3_server: S3Server, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert s3_server.secret_key not in out + err
    envelope = json.loads(out)
    assert envelope["exit_code"] == code
    assert envelope["result_version"] == 1
    return code, envelope


class TestFetchCommand:
    def test_fetch_artifact_and_checkpoint_json(self, capsys, s3_server, archived, tmp_path):
        """Both fetches succeed with a --json summary naming the placed path."""
        artifact, checkpoint, a_key, c_key, _ = archived
        creds = str(s3_server.credentials_file)
        for key, source in ((a_key, artifact), (c_key, checkpoint)):
            code, env = _run(
                capsys, s3_server, "archive", "fetch", "--artifact-uri", f"s3://{BUCKET}/{key}",
                "--dst", str(tmp_path), "--credentials", creds,
            )  # fmt: skip
            assert code == 0, env
            assert env["status"] == "ok"
            assert env["command"] == "archive fetch"
            assert tree(Path(env["data"]["path"])) == tree(source)
        code, env = _run(
            capsys, s3_server, "archive", "fetch", "--artifact-uri", f"s3://{BUCKET}/{a_key}",
            "--dst", str(tmp_path), "--credentials", creds,
        )  # fmt: skip
        assert code == 1
        assert env["errors"][0]["code"] == "fetch_destination_exists"

    @pytest.mark.parametrize(
        "problem", ["bad-uri", "unknown-bucket", "wrong-credentials", "endpoint-down", "none"]
    )
    def test_bad_input_is_a_clear_error(
        self, capsys, monkeypatch, s3_server, archived, tmp_path, problem
    ):
        """Each bad input ends with exit 1, an error naming the problem, nothing placed."""
        _, _, a_key, _, _ = archived
        uri = f"s3://{BUCKET}/{a_key}"
        creds = s3_server.credentials_file
        if problem == "bad-uri":
            uri = f"http://{BUCKET}/{a_key}"
        elif problem == "unknown-bucket":
            uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/{a_key}"
        elif problem == "wrong-credentials":
            creds = s3_server.write_credentials(tmp_path / "wrong.json", secret="not-the-key")
        elif problem == "endpoint-down":
            (port,) = free_ports(1)
            creds = s3_server.write_credentials(
                tmp_path / "down.json", endpoint_url=f"http://127.0.0.1:{port}"
            )
        argv = ["archive", "fetch", "--artifact-uri", uri, "--dst", str(tmp_path / "dst")]
        monkeypatch.delenv("STATECRAFT_S3_CREDENTIALS", raising=False)
        if problem != "none":
            argv += ["--credentials", str(creds)]
        if problem == "endpoint-down":
            argv += ["--retry-wait-s", "1"]  # the opening HEAD's 10 s at most, by default
        code, env = _run(capsys, s3_server, *argv)
        assert code == 1
        assert env["status"] == "error"
        message = env["errors"][0]["message"]
        expected = {
            "bad-uri": "s3://",
            "unknown-bucket": "no-such-bucket",
            "wrong-credentials": "aws_secret_access_key in",
            "endpoint-down": "127.0.0.1",
            "none": "--credentials",
        }[problem]
        assert expected in message, message
        if problem == "endpoint-down":
            assert "raise it with --retry-wait-s, now 1 s" in message
        if problem == "none":
            assert "$STATECRAFT_S3_CREDENTIALS" in message
        assert not (tmp_path / "dst").exists() or list((tmp_path / "dst").iterdir()) == []

    @pytest.mark.parametrize("value", ["0", "-1", "soon"])
    def test_a_bad_retry_wait_is_bad_usage(self, capsys, tmp_path, value):
        """--retry-wait-s takes seconds in (0, 604800]: anything else exits 2 naming it."""
        argv = ["archive", "fetch", "--artifact-uri", "s3://b/k", "--dst", str(tmp_path / "d")]
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--retry-wait-s", value])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "--retry-wait-s" in err
        assert f"{value!r} is not a number of seconds in (0, 604800]" in err


class TestPruneCommand:
    def test_prune_verified_releases_proven_and_keeps_the_rest(
        self, capsys, s3_server, bucket, archived, tmp_path
    ):
        """One proven artifact is released, one without a marker is kept (exit 1, its reason
        in the errors and in data)."""
        _, _, a_key, _, _ = archived
        proven = make_artifact(tmp_path / "a")
        key = f"{a_key}-prune-{uuid.uuid4().hex[:6]}/{proven.name}"
        mark(proven, bucket, key, archive(bucket, proven, key))
        unmarked = make_artifact(tmp_path / "b")
        before = tree(unmarked)
        code, env = _run(
            capsys, s3_server, "archive", "prune-verified", "--paths", f"{proven},{unmarked}",
            "--credentials", str(s3_server.credentials_file),
        )  # fmt: skip
        assert code == 1
        decisions = {d["path"]: d for d in env["data"]["decisions"]}
        assert decisions[str(proven)]["pruned"]
        assert decisions[str(proven)]["freed_bytes"] > 0
        assert not decisions[str(unmarked)]["pruned"]
        assert "no .uploaded" in env["errors"][0]["message"]
        assert tree(unmarked) == before
        assert not (proven / "model.pt").exists()


class TestPublishCommand:
    def test_bad_artifact_dir_and_bare_prefix_are_refused(self, capsys, s3_server, tmp_path):
        """A directory that is not checkpoint_artifacts/iter_N, or a bare prefix without
        --bucket: exit 1 with the fix, before any request."""
        code, env = _run(
            capsys, s3_server, "archive", "publish", "--artifact-dir", str(tmp_path),
            "--upload-prefix", f"s3://{BUCKET}/x/checkpoints",
        )  # fmt: skip
        assert code == 1
        assert "checkpoint_artifacts/iter_" in env["errors"][0]["message"]
        artifact = make_artifact(tmp_path / "run")
        code, env = _run(
            capsys, s3_server, "archive", "publish", "--artifact-dir", str(artifact),
            "--upload-prefix", "x/checkpoints",
        )  # fmt: skip
        assert code == 1
        assert "--bucket" in env["errors"][0]["message"]


class TestPublishFetchPrune:
    def test_publish_then_prune_then_fetch_back(self, capsys, s3_server, tmp_path):
        """``archive publish`` archives an artifact with its receipt; ``prune-verified``
        releases its payloads; ``archive fetch`` brings back exactly what was published."""
        pytest.importorskip("statecraft.checkpoint.archive.publish_bindings")
        artifact = make_artifact(tmp_path / "run")
        published = tree(artifact)
        creds = str(s3_server.credentials_file)
        root = f"pub/{uuid.uuid4().hex[:10]}/run/checkpoints"
        code, env = _run(
            capsys, s3_server, "archive", "publish", "--artifact-dir", str(artifact),
            "--upload-prefix", f"s3://{BUCKET}/{root}", "--credentials", creds,
        )  # fmt: skip
        assert code == 0, env
        uri = env["data"]["uri"]
        assert uri.endswith(f"/checkpoint_artifacts/{artifact.name}")
        code, env = _run(
            capsys, s3_server, "archive", "prune-verified", "--paths", str(artifact),
            "--credentials", creds,
        )  # fmt: skip
        assert code == 0, env
        assert not (artifact / "model.pt").exists()
        code, env = _run(
            capsys, s3_server, "archive", "fetch", "--artifact-uri", uri,
            "--dst", str(tmp_path / "back"), "--credentials", creds,
        )  # fmt: skip
        assert code == 0, env
        back = tree(Path(env["data"]["path"]))
        assert back == {k: v for k, v in published.items() if k != ".uploaded"}
