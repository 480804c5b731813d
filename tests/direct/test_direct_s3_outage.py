"""A blip of the object store is not a lost job: a direct save during which the real S3
server (SeaweedFS) is stopped and restarted completes, and resumes bit-exact; where the
outage outlasts the retry budget, the error says how long it waited and names the knob
(``checkpoint_store.retry_wait_s``)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from s3_server import BUCKET, S3Server, free_ports
from test_direct_save_resume import assert_same, make_tracked, resume, save, state_of, train

from statecraft.checkpoint.config.schema import CheckpointStoreConfig
from statecraft.checkpoint.direct.root import open_direct_root
from statecraft.checkpoint.fencing.object_lease import acquire_object_lease
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, RunAttempt
from statecraft.errors import ConfigError, ObjectRequestError

RUN_TS = "20260101-000000"


def _attempt(tmp_path: Path) -> RunAttempt:
    return RunAttempt(tmp_path / "out" / "p" / "g" / "n" / RUN_TS, RUN_TS, False, True, "test")


class _Blip:
    """The real bucket, except that the first shard PUT stops the server (SIGKILL) and
    restarts it from another thread after ``down_s`` seconds, then goes on: the PUT itself
    meets the outage and must ride it out."""

    def __init__(self, inner: Any, server: S3Server, down_s: float) -> None:
        self.inner = inner
        self.server = server
        self.down_s = down_s
        self.armed = True
        self.restarted = threading.Event()
        self.outage_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _blip(self) -> None:
        self.armed = False
        self.server.kill()
        began = time.monotonic()

        def restart() -> None:
            time.sleep(self.down_s)
            self.server.start()
            self.outage_s = time.monotonic() - began
            self.restarted.set()

        threading.Thread(target=restart, daemon=True).start()

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        if self.armed and not key.endswith(LATEST_POINTER) and "iter_" in key:
            self._blip()
        return str(self.inner.put(key, data, **kw))

    def put_bytes(self, key: str, data: bytes, **kw: Any) -> str:
        if self.armed and "iter_" in key:
            self._blip()
        return str(self.inner.put_bytes(key, data, **kw))


@pytest.mark.slow
def test_a_save_rides_out_a_server_restart(s3_server: S3Server, tmp_path: Path) -> None:
    """SIGKILL of the server as the save's first shard goes out, restarted seconds later: the
    save's requests retry through the outage (the default budget), the save completes and
    the checkpoint resumes bit-exact."""
    config = CheckpointStoreConfig(
        backend="object_store",
        bucket=BUCKET,
        credentials=str(s3_server.credentials_file),
        prefix=f"outage-{uuid.uuid4().hex[:10]}/checkpoints",
    )
    assert config.retry_wait_s >= 60
    root = open_direct_root(config, _attempt(tmp_path))
    assert root.bucket.retry.max_wait_s == config.retry_wait_s
    blip = _Blip(root.bucket, s3_server, down_s=1.0)
    root = open_direct_root(config, _attempt(tmp_path), bucket=blip)
    lease = acquire_object_lease(root.store, ttl_s=600, takeover=False)
    reference = make_tracked()
    train(reference, 3)
    try:
        report = save(reference, root, lease=lease)
    finally:
        assert blip.restarted.wait(60), "the server did not come back"
    assert not blip.armed, "the outage never happened"
    assert blip.outage_s >= 1.0
    assert report.location == f"{root.uri}/iter_000000003"
    assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000003\n"
    resumed = make_tracked(seed=5)
    assert resume(resumed, root).step == 3
    assert_same(state_of(resumed), state_of(reference))


def test_an_exhausted_budget_says_how_long_and_the_knob(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """Nothing answers at the endpoint for longer than ``retry_wait_s``: the error says it
    retried for that long and names the knob to raise."""
    (port,) = free_ports(1)
    path = s3_server.write_credentials(tmp_path / "c.json", endpoint_url=f"http://127.0.0.1:{port}")
    config = CheckpointStoreConfig(
        backend="object_store", bucket=BUCKET, credentials=str(path), retry_wait_s=1.5
    )
    started = time.monotonic()
    with pytest.raises(ObjectRequestError) as info:
        open_direct_root(config, _attempt(tmp_path), connect_timeout_s=1.0)
    waited = time.monotonic() - started
    message = str(info.value)
    assert "the retry budget (raise it with checkpoint_store.retry_wait_s, now 1.5 s)" in message
    assert " over 1." in message  # how long it retried
    assert 1.5 <= waited < 30


def test_the_budget_knob_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"checkpoint_store\.retry_wait_s"):
        CheckpointStoreConfig(retry_wait_s=0)


def test_default_chain_when_no_credentials_are_configured(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty ``checkpoint_store.credentials`` opens the bucket with boto3's default chain
    (here the environment)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    config = CheckpointStoreConfig(
        backend="object_store", bucket=BUCKET, prefix=f"chain-{uuid.uuid4().hex[:8]}/ckpt"
    )
    root = open_direct_root(config, _attempt(tmp_path))
    root.store.write_atomic("probe", b"x")
    assert root.store.read_bytes("probe") == b"x"
    assert "the environment" in root.bucket.credentials.source
