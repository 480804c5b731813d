"""Outages of the real S3 server (SeaweedFS SIGKILLed and restarted) in the middle of a
multipart upload: within the retry budget the upload completes; past it the upload fails
with the budget and its knob named, and its abort rides out the restart, so no orphaned
multipart upload is left either way."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from s3_proxy import Fault, FaultProxy
from s3_server import BUCKET, S3Server

from statecraft.errors import ObjectRequestError
from statecraft.storage.s3 import RetryPolicy, S3Bucket, TransferSettings
from statecraft.storage.s3_credentials import load_credentials

MIB = 1 << 20


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    proxy = FaultProxy(s3_server.s3_port)
    try:
        yield proxy
    finally:
        proxy.close()


def _crash_and_restart(
    server: S3Server, down_s: float
) -> tuple[threading.Event, list[float], Callable[[], None]]:
    """A hook: SIGKILL the server now, start it again ``down_s`` seconds later."""
    restarted = threading.Event()
    outage: list[float] = []

    def crash() -> None:
        server.kill()
        began = time.monotonic()

        def restart() -> None:
            time.sleep(down_s)
            server.start()
            outage.append(time.monotonic() - began)
            restarted.set()

        threading.Thread(target=restart, daemon=True).start()

    return restarted, outage, crash


def _uploads(server: S3Server, prefix: str) -> list[object]:
    listed = server.client().list_multipart_uploads(Bucket=BUCKET, Prefix=prefix)
    return list(listed.get("Uploads", []))


@pytest.mark.slow
@pytest.mark.parametrize("budget_s", [60.0, 1.0])
def test_kill_mid_upload_leaves_no_orphaned_upload(
    budget_s: float, proxy: FaultProxy, s3_server: S3Server, tmp_path: Path
) -> None:
    """The server dies as part 1 arrives and comes back a second later (plus its start-up).
    With a 60 s budget the upload completes; with 1 s it fails naming the budget, and the
    abort that follows waits for the server: no multipart upload is left under the key."""
    prefix = f"t/outage-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/f"
    path = s3_server.write_credentials(tmp_path / "c.json", endpoint_url=proxy.endpoint_url)
    retry = RetryPolicy(max_wait_s=budget_s, max_delay_s=0.5)
    bucket = S3Bucket(
        load_credentials(path), BUCKET, retry=retry, transfer=TransferSettings(5 * MIB)
    )
    data = os.urandom(12 * MIB)
    (tmp_path / "f").write_bytes(data)
    restarted, outage, crash = _crash_and_restart(s3_server, down_s=1.0)
    proxy.inject(Fault.HOOK, method="PUT", path_contains="partNumber=1", hook=crash)
    try:
        if budget_s > 30:
            bucket.put_file(key, tmp_path / "f", if_none_match=True)
        else:
            with pytest.raises(ObjectRequestError) as info:
                bucket.put_file(key, tmp_path / "f", if_none_match=True)
            assert "the retry budget (raise it with RetryPolicy(max_wait_s=...), now 1 s)" in str(
                info.value
            )
    finally:
        assert restarted.wait(60), "the server did not come back"
    assert outage
    assert outage[0] >= 1.0
    assert _uploads(s3_server, prefix) == []
    objects = s3_server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    if budget_s > 30:
        assert s3_server.client().get_object(Bucket=BUCKET, Key=key)["Body"].read() == data
    else:
        assert objects == []
