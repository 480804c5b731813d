"""Where S3 credentials come from (statecraft.storage.s3_credentials.open_credentials), each
source proven against the real SeaweedFS server: boto3's default chain from the environment,
a profile of temporary AWS config files (by name and by AWS_PROFILE), a JSON file naming a
profile or holding a session token; wrong keys end in one error naming the source, never
the secret and the key id at most by its last four characters."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import BUCKET, S3Server

from statecraft.errors import CredentialsError, ObjectRequestError
from statecraft.storage.s3 import RetryPolicy, S3Bucket
from statecraft.storage.s3_credentials import open_credentials

FAST_RETRY = RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.02)
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture(autouse=True)
def clean_aws(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No AWS setting of the machine leaks in: empty config files, no instance metadata.
    The AWS files (which hold the secret by design) live outside ``tmp_path``, which the
    secret guard of conftest.py scans."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    aws = tmp_path_factory.mktemp("aws")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(aws / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(aws / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return aws


@pytest.fixture(autouse=True)
def no_secret_logged(caplog: pytest.LogCaptureFixture, s3_server: S3Server) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="statecraft")
    yield
    leaked = [r.getMessage() for r in caplog.records if s3_server.secret_key in r.getMessage()]
    assert leaked == []


def round_trip(bucket: S3Bucket) -> None:
    """A conditional create, a read and a delete through ``bucket``."""
    key = f"t/chain-{uuid.uuid4().hex[:8]}"
    bucket.put(key, b"payload", if_none_match=True)
    assert bucket.get(key) == b"payload"
    bucket.delete(key)


def write_profile(aws: Path, server: S3Server, name: str, *, secret: str | None = None) -> None:
    """Profile ``name`` in the temporary AWS files: keys in credentials, region and the
    endpoint in config."""
    (aws / "credentials").write_text(
        f"[{name}]\naws_access_key_id = {server.access_key}\n"
        f"aws_secret_access_key = {secret or server.secret_key}\n"
    )
    section = "default" if name == "default" else f"profile {name}"
    (aws / "config").write_text(
        f"[{section}]\nregion = us-east-1\nendpoint_url = {server.endpoint_url}\n"
    )


class TestSources:
    def test_environment(self, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
        """An empty setting is the default chain: keys and endpoint from the environment."""
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        bucket = S3Bucket(open_credentials(""), BUCKET, retry=FAST_RETRY)
        bucket.check()
        round_trip(bucket)
        assert bucket.credentials.source == (
            "AWS credentials from the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
        )
        assert bucket.identity().endpoint == f"127.0.0.1:{s3_server.s3_port}"
        assert bucket.identity().access_key_id == s3_server.access_key

    def test_named_profile(self, s3_server: S3Server, clean_aws: Path) -> None:
        """``profile:NAME`` reads the profile of AWS_CONFIG_FILE/AWS_SHARED_CREDENTIALS_FILE,
        its endpoint_url included."""
        write_profile(clean_aws, s3_server, "training")
        bucket = S3Bucket(open_credentials("profile:training"), BUCKET, retry=FAST_RETRY)
        round_trip(bucket)
        assert bucket.credentials.source == (
            "AWS profile 'training' via the shared credentials file, profile 'training'"
        )

    def test_aws_profile_variable(
        self, s3_server: S3Server, clean_aws: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The default chain follows AWS_PROFILE."""
        write_profile(clean_aws, s3_server, "other")
        monkeypatch.setenv("AWS_PROFILE", "other")
        bucket = S3Bucket(open_credentials("default"), BUCKET, retry=FAST_RETRY)
        round_trip(bucket)
        assert "profile 'other'" in bucket.credentials.source

    def test_file_naming_a_profile(
        self, s3_server: S3Server, clean_aws: Path, tmp_path: Path
    ) -> None:
        """A JSON file may name a profile and give the endpoint itself."""
        write_profile(clean_aws, s3_server, "training")
        (clean_aws / "config").write_text("[profile training]\nregion = us-east-1\n")
        path = tmp_path / "c.json"
        path.write_text(json.dumps({"profile": "training", "endpoint_url": s3_server.endpoint_url}))
        bucket = S3Bucket(open_credentials(str(path)), BUCKET, retry=FAST_RETRY)
        round_trip(bucket)
        assert bucket.credentials.source.startswith(f"credentials file {path} via ")

    def test_file_without_keys_uses_the_chain(
        self, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A file with only the endpoint takes its keys from the environment; a relative
        path is resolved against ``base``."""
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
        (tmp_path / "c.json").write_text(json.dumps({"endpoint_url": s3_server.endpoint_url}))
        bucket = S3Bucket(open_credentials("c.json", base=tmp_path), BUCKET, retry=FAST_RETRY)
        round_trip(bucket)

    def test_session_token_is_sent(self, s3_server: S3Server, tmp_path: Path) -> None:
        """A file's session token is accepted, signed into every request (the
        X-Amz-Security-Token header) and never shown. SeaweedFS did not issue this token, so
        it refuses it: the error names the file and the token's key, not its value."""
        token = "session-token-" + uuid.uuid4().hex
        path = s3_server.write_credentials(tmp_path / "c.json")
        path.write_text(json.dumps({**json.loads(path.read_text()), "aws_session_token": token}))
        credentials = open_credentials(str(path))
        assert token not in repr(credentials)
        bucket = S3Bucket(credentials, BUCKET, retry=FAST_RETRY)
        sent: list[bytes] = []
        bucket.client.meta.events.register(
            "before-send.s3",
            lambda request, **_: sent.append(request.headers.get("X-Amz-Security-Token", b"")),
        )
        with pytest.raises(ObjectRequestError) as info:
            bucket.put("t/token", b"x")
        assert sent == [token.encode()]
        message = str(info.value)
        assert f"in credentials file {path} (and aws_session_token: expired?)" in message
        assert token not in message
        assert bucket.credentials.scrub(f"x {token} y") == "x *** y"

    def test_session_token_from_the_environment(
        self, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The default chain takes AWS_SESSION_TOKEN with the keys and sends it."""
        token = "env-token-" + uuid.uuid4().hex
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
        bucket = S3Bucket(open_credentials(""), BUCKET, retry=FAST_RETRY)
        assert bucket.credentials.aws_session_token == token
        with pytest.raises(ObjectRequestError) as info:
            bucket.check()
        assert token not in str(info.value)
        assert "in AWS credentials from the environment" in str(info.value)


class TestRefusals:
    def test_wrong_keys_from_the_environment(
        self, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Wrong keys: one error naming the source, the key id by its last four characters
        (once), never the secret or the whole key id."""
        wrong = "wrong-secret-" + uuid.uuid4().hex
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        bucket = S3Bucket(open_credentials(""), BUCKET, retry=FAST_RETRY)
        with pytest.raises(ObjectRequestError) as info:
            bucket.check()
        message = str(info.value)
        assert "in AWS credentials from the environment (AWS_ACCESS_KEY_ID" in message
        assert message.count(f"...{s3_server.access_key[-4:]}") == 1
        assert s3_server.access_key not in message
        assert wrong not in message
        assert s3_server.secret_key not in message

    def test_wrong_keys_of_a_profile(self, s3_server: S3Server, clean_aws: Path) -> None:
        write_profile(clean_aws, s3_server, "training", secret="not-the-secret-0123")
        bucket = S3Bucket(open_credentials("profile:training"), BUCKET, retry=FAST_RETRY)
        with pytest.raises(ObjectRequestError, match="in AWS profile 'training' via") as info:
            bucket.put("t/never", b"x")
        assert "not-the-secret-0123" not in str(info.value)

    def test_no_credentials_anywhere(self) -> None:
        """An empty chain: a CredentialsError listing where it looked, before any request."""
        with pytest.raises(CredentialsError, match="no AWS credentials found") as info:
            S3Bucket(open_credentials(""), BUCKET)
        assert "the default AWS credential chain" in str(info.value)

    def test_unknown_profile(self) -> None:
        with pytest.raises(CredentialsError, match="AWS profile 'missing' is not in"):
            S3Bucket(open_credentials("profile:missing"), BUCKET)

    def test_profile_without_a_name(self) -> None:
        with pytest.raises(CredentialsError, match="give the profile's name"):
            open_credentials("profile:")
