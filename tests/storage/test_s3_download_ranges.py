"""Downloads of objects larger than one part go through s3transfer's TransferManager
(statecraft/storage/s3_download.py), against the real S3 server (SeaweedFS) behind the fault
proxy: every range is bound to the etag the HEAD saw (no second HEAD), an object replaced
mid-download places nothing and says so, a range answered 500 is retried by the bucket's
retry loop, and a cut range is fetched again; the placed bytes are exact."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_proxy import Fault, FaultProxy
from s3_server import BUCKET, S3Server

from statecraft.errors import ObjectRequestError
from statecraft.storage.s3 import RetryPolicy, S3Bucket, TransferSettings
from statecraft.storage.s3_credentials import load_credentials

MIB = 1 << 20


@pytest.fixture
def faulty(proxy: FaultProxy, s3_server: S3Server, tmp_path: Path) -> Iterator[S3Bucket]:
    """Three ranges of 5 MiB, two in flight, every request through the proxy."""
    path = s3_server.write_credentials(tmp_path / "proxy.json", endpoint_url=proxy.endpoint_url)
    proxy.clear()
    yield S3Bucket(
        load_credentials(path),
        BUCKET,
        retry=RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05),
        transfer=TransferSettings(5 * MIB, concurrency=2),
    )
    proxy.clear()


@pytest.fixture
def key(s3_server: S3Server) -> str:
    return f"ranges/{uuid.uuid4().hex[:10]}/blob"


def _place(server: S3Server, key: str, data: bytes) -> None:
    server.client().put_object(
        Bucket=BUCKET, Key=key, Body=data, Metadata={"sha256": hashlib.sha256(data).hexdigest()}
    )


def test_three_ranges_one_head_exact_bytes(
    faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, key: str, tmp_path: Path
) -> None:
    """13 MiB arrive as three ranged GETs after the one HEAD; the bytes and digest are exact
    and only the placed file is left."""
    data = os.urandom(13 * MIB)
    _place(s3_server, key, data)
    (tmp_path / "dst").mkdir()
    fetched = faulty.download(key, tmp_path / "dst" / "out")
    assert fetched.sha256 == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "dst" / "out").read_bytes() == data
    assert os.listdir(tmp_path / "dst") == ["out"]
    methods = [m for m, _, _ in proxy.requests]
    assert methods.count("HEAD") == 1
    assert [o for m, _, o in proxy.requests if m == "GET"] == ["206", "206", "206"]


def test_object_replaced_midway_places_nothing(
    faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, key: str, tmp_path: Path
) -> None:
    """The object is overwritten after the HEAD: the If-Match GETs are refused, the error says
    the object changed, and nothing (no temporary either) is placed."""
    _place(s3_server, key, os.urandom(13 * MIB))
    proxy.overwrite_on_get(s3_server.client(), BUCKET, key)
    with pytest.raises(ObjectRequestError) as info:
        faulty.download(key, tmp_path / "out")
    assert f"{key!r} changed during the download" in str(info.value)
    assert os.listdir(tmp_path) == ["proxy.json"]


@pytest.mark.parametrize("fault", [Fault.INTERNAL_ERROR, Fault.DROP_MID_BODY])
def test_a_failed_range_is_fetched_again(
    faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, key: str, tmp_path: Path, fault
) -> None:
    """A range answered 500 or cut mid-body is fetched again; the placed bytes are exact."""
    data = os.urandom(13 * MIB)
    _place(s3_server, key, data)
    rule = proxy.inject(fault, method="GET", path_contains=key)
    faulty.download(key, tmp_path / "out")
    assert rule.hits == 1
    assert (tmp_path / "out").read_bytes() == data
