"""Bad upload input fails before training with an error naming the culprit, and touches
nothing local: a missing or malformed credentials file, a wrong secret, an unknown bucket, an
endpoint that is down, an empty knob (real SeaweedFS: the session ``s3_server``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_runs import RUN, open_checkpointer
from s3_server import BUCKET, S3Server, free_ports

from statecraft.errors import ConfigError, CredentialsError, ObjectRequestError


def _open(out: Path, credentials: str, bucket: str = BUCKET, *extra: str):
    ckpt, _ = open_checkpointer(
        out,
        "upload.enabled=true",
        f"upload.bucket={bucket}",
        f"upload.credentials={credentials}",
        *extra,
    )
    return ckpt


def _refused(
    out: Path, credentials: str, error: type[Exception], bucket: str = BUCKET, *extra: str
) -> str:
    ckpt = _open(out, credentials, bucket, *extra)
    with pytest.raises(error) as caught:
        ckpt.resume()
    assert not RUN.job_dir(out).exists(), "nothing local may be created before the check"
    return str(caught.value)


class TestBadUploadInput:
    def test_missing_credentials_file(self, tmp_path: Path) -> None:
        """A credentials path that does not exist names the knob and the file."""
        missing = tmp_path / "nope.json"
        text = _refused(tmp_path / "out", str(missing), CredentialsError)
        assert "upload.credentials" in text
        assert str(missing) in text

    def test_relative_credentials_path_resolves_against_the_cwd(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative upload.credentials is read from the CWD (and named absolute)."""
        monkeypatch.chdir(tmp_path)
        text = _refused(tmp_path / "out", "creds/s3.json", CredentialsError)
        assert str(tmp_path / "creds" / "s3.json") in text

    def test_malformed_credentials_file(self, tmp_path: Path, s3_server: S3Server) -> None:
        """A file that is not JSON is named with the position of the problem, no content."""
        path = tmp_path / "bad.json"
        path.write_text('{"aws_secret_access_key": "hunter2", ')
        text = _refused(tmp_path / "out", str(path), CredentialsError)
        assert str(path) in text
        assert "not valid JSON" in text
        assert "hunter2" not in text

    def test_wrong_secret(self, tmp_path: Path, s3_server: S3Server) -> None:
        """Keys the endpoint refuses fail naming the bucket and the file, never the secret."""
        path = s3_server.write_credentials(tmp_path / "wrong.json", secret="not-the-secret-0")
        text = _refused(tmp_path / "out", str(path), ObjectRequestError)
        assert f"s3://{BUCKET}" in text
        assert str(path) in text
        assert "not-the-secret-0" not in text

    def test_unknown_bucket(self, tmp_path: Path, s3_server: S3Server) -> None:
        """A bucket that does not exist is named."""
        text = _refused(
            tmp_path / "out", str(s3_server.credentials_file), ObjectRequestError, "no-such-bkt"
        )
        assert "s3://no-such-bkt" in text

    def test_endpoint_down(self, tmp_path: Path, s3_server: S3Server) -> None:
        """An endpoint nobody listens on fails naming it, after the retry budget of
        upload.retry_wait_s (here 1 s; the opening HEAD waits at most 10 s by default)."""
        (port,) = free_ports(1)
        path = s3_server.write_credentials(
            tmp_path / "down.json", endpoint_url=f"http://127.0.0.1:{port}"
        )
        text = _refused(
            tmp_path / "out", str(path), ObjectRequestError, BUCKET, "upload.retry_wait_s=1"
        )
        assert f"127.0.0.1:{port}" in text
        assert "upload.retry_wait_s, now 1 s" in text

    def test_empty_bucket_knob(self, tmp_path: Path) -> None:
        """upload.enabled with no bucket names the knob; an empty upload.credentials is not
        an error (it means boto3's default credential chain)."""
        ckpt, _ = open_checkpointer(tmp_path, "upload.enabled=true")
        with pytest.raises(ConfigError) as caught:
            ckpt.resume()
        assert "upload.bucket" in str(caught.value)
        assert "upload.credentials" not in str(caught.value)
        assert not RUN.job_dir(tmp_path).exists()

    def test_default_chain_reaches_the_archive(
        self, tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """upload.credentials left empty: the keys and endpoint come from the environment
        (boto3's chain), and the archive opens."""
        import json

        values = json.loads(Path(s3_server.credentials_file).read_text())
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", values["aws_access_key_id"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", values["aws_secret_access_key"])
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", values["endpoint_url"])
        monkeypatch.setenv("AWS_DEFAULT_REGION", values.get("region") or "us-east-1")
        ckpt = _open(tmp_path / "out", "", BUCKET)
        ckpt.resume()
        ckpt.close()
        assert RUN.job_dir(tmp_path / "out").exists()
