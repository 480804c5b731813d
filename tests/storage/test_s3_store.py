"""Tests of statecraft.storage.s3 (S3Bucket over boto3) and s3_credentials against a real
SeaweedFS server, with faults injected by a loopback proxy (tests/s3_proxy.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_proxy import Fault, FaultProxy
from s3_server import BUCKET, S3Server, free_ports

from statecraft.errors import (
    ConfigError,
    CredentialsError,
    ObjectRequestError,
    PreconditionFailed,
    StoreConflictError,
)
from statecraft.storage import FileStat, ObjectInfo, ObjectStore
from statecraft.storage.s3 import RetryPolicy, S3Bucket, TransferSettings
from statecraft.storage.s3_credentials import S3Credentials, S3Identity, load_credentials
from statecraft.storage.s3_retry import Failure

MIB = 1 << 20
FAST_RETRY = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05)


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix no other test uses."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"t/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def no_secret_logged(caplog: pytest.LogCaptureFixture, s3_server: S3Server) -> Iterator[None]:
    """Every test of the file: no log line (statecraft at DEBUG, the rest at INFO) holds the
    server's secret key."""
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="statecraft")
    yield
    leaked = [r.getMessage() for r in caplog.records if s3_server.secret_key in r.getMessage()]
    assert leaked == []


@pytest.fixture(scope="module")
def credentials(s3_server: S3Server) -> S3Credentials:
    return load_credentials(s3_server.credentials_file)


@pytest.fixture(scope="module")
def bucket(credentials: S3Credentials) -> S3Bucket:
    """An S3Bucket talking straight to the server (one client for the module: building a
    boto3 client costs a few hundred milliseconds)."""
    return S3Bucket(credentials, BUCKET, retry=FAST_RETRY)


@pytest.fixture(scope="module")
def proxied(
    proxy: FaultProxy, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> S3Bucket:
    path = s3_server.write_credentials(
        tmp_path_factory.mktemp("proxied") / "proxy.json", endpoint_url=proxy.endpoint_url
    )
    return S3Bucket(
        load_credentials(path),
        BUCKET,
        retry=FAST_RETRY,
        read_timeout_s=10,
        transfer=TransferSettings(5 * MIB, concurrency=2),
    )


@pytest.fixture
def faulty(proxy: FaultProxy, proxied: S3Bucket) -> Iterator[S3Bucket]:
    """An S3Bucket whose requests pass the fault proxy (no fault armed, no request logged)."""
    proxy.clear()
    yield proxied
    proxy.clear()


def remote(server: S3Server, prefix: str) -> dict[str, bytes]:
    """Ground truth read with a plain boto3 client: every object under ``prefix``."""
    client = server.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def assert_no_secret(server: S3Server, error: BaseException) -> None:
    assert server.secret_key not in str(error)
    assert server.secret_key not in repr(error)
    assert server.secret_key not in json.dumps(getattr(error, "to_json", dict)())


class TestS3Bucket:
    """S3Bucket: the BucketClient operations against the real server."""

    def test_put_get_head_list_delete(self, bucket: S3Bucket, prefix: str) -> None:
        """A put is readable at once with its etag and size; list is sorted; delete removes
        the key and deleting an absent key is not an error."""
        etag = bucket.put(f"{prefix}/b", b"bee")
        bucket.put(f"{prefix}/a", b"ay")
        assert bucket.get(f"{prefix}/b") == b"bee"
        assert bucket.head(f"{prefix}/b") == ObjectInfo(3, etag)
        assert bucket.head(f"{prefix}/missing") is None
        assert bucket.list(f"{prefix}/") == [f"{prefix}/a", f"{prefix}/b"]
        assert bucket.stat(f"{prefix}/b").sha256 == hashlib.sha256(b"bee").hexdigest()  # type: ignore[union-attr]
        bucket.delete(f"{prefix}/b")
        bucket.delete(f"{prefix}/b")
        assert bucket.list(f"{prefix}/") == [f"{prefix}/a"]

    def test_get_missing_key(self, bucket: S3Bucket, prefix: str) -> None:
        """Reading an absent key raises FileNotFoundError naming the key and the bucket."""
        with pytest.raises(FileNotFoundError) as info:
            bucket.get(f"{prefix}/nope")
        assert str(info.value) == f"no object '{prefix}/nope' in {bucket.describe()}"

    def test_list_follows_every_page(self, credentials: S3Credentials, prefix: str) -> None:
        """A listing longer than one page returns every key, sorted."""
        paged = S3Bucket(credentials, BUCKET, list_page_size=2)
        keys = [f"{prefix}/k{i}" for i in (4, 0, 3, 1, 2)]
        for key in keys:
            paged.put(key, b".")
        assert paged.list(f"{prefix}/") == sorted(keys)

    def test_ranged_get(self, bucket: S3Bucket, prefix: str) -> None:
        """get_range returns exactly the requested bytes, fewer at the end, none for 0."""
        bucket.put(f"{prefix}/r", bytes(range(100)))
        assert bucket.get_range(f"{prefix}/r", 10, 5) == bytes(range(10, 15))
        assert bucket.get_range(f"{prefix}/r", 95, 50) == bytes(range(95, 100))
        assert bucket.get_range(f"{prefix}/r", 0, 0) == b""
        with pytest.raises(ValueError, match="offsets must be >= 0"):
            bucket.get_range(f"{prefix}/r", -1, 2)
        with pytest.raises(ObjectRequestError) as info:
            bucket.get_range(f"{prefix}/r", 200, 5)
        assert f"get '{prefix}/r' failed (InvalidRange 416" in str(info.value)

    def test_conditional_create_refuses_existing_key(
        self, bucket: S3Bucket, s3_server: S3Server, prefix: str
    ) -> None:
        """If-None-Match: * on an existing key is a 412: PreconditionFailed naming the key;
        the object is unchanged."""
        bucket.put(f"{prefix}/k", b"original", if_none_match=True)
        before = remote(s3_server, prefix)
        with pytest.raises(PreconditionFailed) as info:
            bucket.put(f"{prefix}/k", b"intruder", if_none_match=True)
        assert str(info.value) == (
            f"If-None-Match: * refused: '{prefix}/k' exists in {bucket.describe()}"
        )
        assert remote(s3_server, prefix) == before == {f"{prefix}/k": b"original"}

    def test_if_match(self, bucket: S3Bucket, s3_server: S3Server, prefix: str) -> None:
        """If-Match with the current etag replaces; with a stale etag or on an absent key it
        is a 412 and nothing changes."""
        stale = bucket.put(f"{prefix}/k", b"v1")
        current = bucket.put(f"{prefix}/k", b"v2", if_match=stale)
        before = remote(s3_server, prefix)
        with pytest.raises(PreconditionFailed) as info:
            bucket.put(f"{prefix}/k", b"v3", if_match=stale)
        assert (
            str(info.value) == f"If-Match: {stale} refused for '{prefix}/k' in {bucket.describe()}"
        )
        with pytest.raises(PreconditionFailed):
            bucket.put(f"{prefix}/absent", b"v", if_match=current)
        assert remote(s3_server, prefix) == before == {f"{prefix}/k": b"v2"}

    def test_check_names_an_unknown_bucket(self, credentials: S3Credentials) -> None:
        """check() of a bucket that does not exist says so and how to fix it."""
        bucket = S3Bucket(credentials, "no-such-bucket", retry=FAST_RETRY)
        with pytest.raises(ObjectRequestError) as info:
            bucket.check()
        assert "Bucket 'no-such-bucket' does not exist: create it or fix the bucket name" in str(
            info.value
        )
        S3Bucket(credentials, BUCKET).check()


class TestTransfers:
    """put_file (multipart above the part size) and download."""

    def test_multipart_upload_and_download(
        self, credentials: S3Credentials, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """A file of 2.2 parts goes up as 3 parts (etag ``-3``) with its sha256 in the
        metadata and comes back byte-identical through download."""
        bucket = S3Bucket(credentials, BUCKET, transfer=TransferSettings(5 * MIB, concurrency=2))
        data = os.urandom(11 * MIB)
        source = tmp_path / "big.bin"
        source.write_bytes(data)
        etag = bucket.put_file(f"{prefix}/big", source, if_none_match=True)
        assert etag.strip('"').endswith("-3")
        there = bucket.stat(f"{prefix}/big")
        assert there is not None
        assert (there.size, there.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        assert remote(s3_server, prefix)[f"{prefix}/big"] == data
        fetched = bucket.download(f"{prefix}/big", tmp_path / "back.bin")
        assert fetched == there
        assert (tmp_path / "back.bin").read_bytes() == data
        assert sorted(p.name for p in tmp_path.iterdir()) == ["back.bin", "big.bin"]
        with pytest.raises(PreconditionFailed, match="If-None-Match: \\* refused"):
            bucket.put_file(f"{prefix}/big", source, if_none_match=True)

    def test_small_file_is_one_put(self, bucket: S3Bucket, prefix: str, tmp_path: Path) -> None:
        """A file within the part size is one PUT (a plain md5 etag)."""
        source = tmp_path / "small.bin"
        source.write_bytes(b"tiny")
        etag = bucket.put_file(f"{prefix}/small", source)
        assert etag == f'"{hashlib.md5(b"tiny").hexdigest()}"'

    def test_download_of_missing_key_places_nothing(
        self, bucket: S3Bucket, prefix: str, tmp_path: Path
    ) -> None:
        """Downloading an absent key raises FileNotFoundError and leaves no file."""
        with pytest.raises(FileNotFoundError, match="no object"):
            bucket.download(f"{prefix}/nope", tmp_path / "x")
        assert list(tmp_path.iterdir()) == []

    def test_transfer_settings_are_validated(self) -> None:
        """A part size below S3's 5 MiB minimum or a zero concurrency is a ConfigError."""
        with pytest.raises(ConfigError, match=r"part_size: got 1024; expected 5 MiB\.\.5 GiB"):
            TransferSettings(1024)
        with pytest.raises(ConfigError, match="concurrency: got 0"):
            TransferSettings(concurrency=0)
        with pytest.raises(ConfigError, match="attempts: got 0"):
            RetryPolicy(attempts=0)


class TestFaults:
    """Every injected fault is retried to success, or ends in a clear ObjectRequestError."""

    @pytest.mark.parametrize(
        "fault", [Fault.SLOWDOWN, Fault.INTERNAL_ERROR, Fault.DROP_REQUEST, Fault.LOST_RESPONSE]
    )
    def test_put_retried_to_success(
        self, faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, prefix: str, fault: Fault
    ) -> None:
        """A PUT that met the fault once is retried and lands exactly once."""
        rule = proxy.inject(fault, method="PUT", path_contains=prefix)
        faulty.put(f"{prefix}/k", b"payload")
        assert rule.hits == 1
        assert remote(s3_server, prefix) == {f"{prefix}/k": b"payload"}

    @pytest.mark.parametrize(
        "fault", [Fault.SLOWDOWN, Fault.INTERNAL_ERROR, Fault.DROP_MID_BODY, Fault.LOST_RESPONSE]
    )
    def test_get_retried_to_success(
        self, faulty: S3Bucket, bucket: S3Bucket, proxy: FaultProxy, prefix: str, fault: Fault
    ) -> None:
        """A GET whose answer was throttled, failed, cut mid-body or lost is fetched again."""
        data = os.urandom(256 << 10)
        bucket.put(f"{prefix}/k", data)
        rule = proxy.inject(fault, method="GET", path_contains=prefix)
        assert faulty.get(f"{prefix}/k") == data
        assert rule.hits == 1

    def test_download_resumes_a_dropped_body(
        self, faulty: S3Bucket, bucket: S3Bucket, proxy: FaultProxy, prefix: str, tmp_path: Path
    ) -> None:
        """A download of three ranged parts, one cut halfway, asks again for that part (once)
        and places the exact bytes."""
        data = os.urandom(11 * MIB)
        bucket.put(f"{prefix}/k", data)
        proxy.inject(Fault.DROP_MID_BODY, method="GET", path_contains=prefix)
        faulty.download(f"{prefix}/k", tmp_path / "out")
        assert (tmp_path / "out").read_bytes() == data
        gets = [o for m, _, o in proxy.requests if m == "GET"]
        assert sorted(gets) == ["206", "206", "206", "drop_mid_body"]
        assert os.listdir(tmp_path) == ["out"]

    def test_download_of_an_object_replaced_midway_places_nothing(
        self, faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """The object is overwritten after the HEAD: the If-Match GET is refused, the error
        says the object changed, and no file is placed."""
        key = f"{prefix}/k"
        other = s3_server.client()
        other.put_object(Bucket=BUCKET, Key=key, Body=b"v1" * 1000)
        proxy.overwrite_on_get(other, BUCKET, key)
        with pytest.raises(ObjectRequestError) as info:
            faulty.download(key, tmp_path / "out")
        assert f"{key!r} changed during the download" in str(info.value)
        assert str(info.value).endswith(f"nothing was placed at {tmp_path / 'out'}. Download again")
        assert os.listdir(tmp_path) == []

    def test_persistent_throttling_ends_in_a_clear_error(
        self, faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, prefix: str
    ) -> None:
        """503 SlowDown on every attempt: ObjectRequestError after the bounded attempts,
        naming the request and the code; nothing was written."""
        proxy.inject(Fault.SLOWDOWN, method="PUT", path_contains=prefix, times=100)
        with pytest.raises(ObjectRequestError) as info:
            faulty.put(f"{prefix}/k", b"x")
        assert str(info.value) == (
            f"{faulty.describe()}: put '{prefix}/k' failed after 4 attempt(s) (SlowDown 503: "
            "Please reduce your request rate.). The service kept failing; try again later"
        )
        assert info.value.attempts == 4  # type: ignore[attr-defined]
        assert remote(s3_server, prefix) == {}
        assert_no_secret(s3_server, info.value)

    def test_ambiguous_conditional_create_is_harmless(
        self, faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, prefix: str
    ) -> None:
        """A conditional create applied but whose response was lost is retried, meets 412,
        finds its own bytes there and succeeds."""
        rule = proxy.inject(Fault.LOST_RESPONSE, method="PUT", path_contains=prefix)
        etag = faulty.put(f"{prefix}/marker", b"mine", if_none_match=True)
        assert rule.hits == 1
        assert [o for _, _, o in proxy.requests] == ["lost_response", "412", "200"]
        assert etag == faulty.head(f"{prefix}/marker").etag  # type: ignore[union-attr]
        assert remote(s3_server, prefix) == {f"{prefix}/marker": b"mine"}

    def test_without_the_comparison_the_ambiguous_create_fails(
        self, faulty: S3Bucket, proxy: FaultProxy, prefix: str
    ) -> None:
        """A deliberately broken bucket that retries without comparing meets its own object
        as a 412 and fails: the harmless retry above is the comparison's doing."""

        class Broken(S3Bucket):
            def conditional(self, op, key, send, *args, **kwargs):  # type: ignore[no-untyped-def]
                return self.call(op, key, send)

        broken = Broken(faulty.credentials, BUCKET, retry=FAST_RETRY)
        proxy.inject(Fault.LOST_RESPONSE, method="PUT", path_contains=prefix)
        with pytest.raises(PreconditionFailed):
            broken.put(f"{prefix}/marker", b"mine", if_none_match=True)
        assert [o for _, _, o in proxy.requests] == ["lost_response", "412"]

    def test_ambiguous_if_match_is_harmless(
        self, faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, prefix: str
    ) -> None:
        """An If-Match replace applied but unanswered: the retry's 412 finds the new bytes
        and succeeds."""
        old = faulty.put(f"{prefix}/k", b"v1")
        proxy.inject(Fault.LOST_RESPONSE, method="PUT", path_contains=prefix)
        faulty.put(f"{prefix}/k", b"v2", if_match=old)
        assert remote(s3_server, prefix) == {f"{prefix}/k": b"v2"}

    def test_retry_meeting_another_object_is_refused(
        self, faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, prefix: str
    ) -> None:
        """A conditional create retried after a 503 that meets someone else's object is
        PreconditionFailed; their object is unchanged."""
        faulty.put(f"{prefix}/marker", b"theirs")
        proxy.inject(Fault.SLOWDOWN, method="PUT", path_contains=prefix)
        with pytest.raises(PreconditionFailed, match="If-None-Match: \\* refused"):
            faulty.put(f"{prefix}/marker", b"mine", if_none_match=True)
        assert remote(s3_server, prefix) == {f"{prefix}/marker": b"theirs"}

    @pytest.mark.parametrize("fault", [Fault.LOST_RESPONSE, Fault.INTERNAL_ERROR])
    def test_multipart_completion_retried(
        self,
        faulty: S3Bucket,
        proxy: FaultProxy,
        s3_server: S3Server,
        prefix: str,
        tmp_path: Path,
        fault: Fault,
    ) -> None:
        """A multipart completion whose response was lost (or that failed) is retried and
        the object is the file, once; a part upload that failed is re-sent."""
        bucket = faulty
        proxy.inject(Fault.SLOWDOWN, method="PUT", path_contains="partNumber=2")
        proxy.inject(fault, method="POST", path_contains="uploadId=")
        data = os.urandom(6 * MIB)
        (tmp_path / "f").write_bytes(data)
        bucket.put_file(f"{prefix}/f", tmp_path / "f", if_none_match=True)
        assert remote(s3_server, prefix) == {f"{prefix}/f": data}
        completions = [o for m, p, o in proxy.requests if m == "POST" and "uploadId=" in p]
        assert completions[0] == fault.value
        assert len(completions) == 2
        part2 = [o for m, p, o in proxy.requests if m == "PUT" and "partNumber=2" in p]
        assert part2 == ["slowdown", "200"]

    def test_conditional_completion_loses_to_another_writer(
        self, faulty: S3Bucket, proxy: FaultProxy, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """Another client creates the key while the parts go up: the conditional completion
        is a 412, their object stays, and the upload is aborted."""
        key = f"{prefix}/f"
        theirs = s3_server.client()
        proxy.inject(
            Fault.HOOK,
            method="PUT",
            path_contains="partNumber=1",
            hook=lambda: theirs.put_object(Bucket=BUCKET, Key=key, Body=b"theirs"),
        )
        (tmp_path / "f").write_bytes(os.urandom(6 * MIB))
        with pytest.raises(PreconditionFailed) as info:
            faulty.put_file(key, tmp_path / "f", if_none_match=True)
        assert str(info.value) == f"If-None-Match: * refused: {key!r} exists in {faulty.describe()}"
        assert remote(s3_server, prefix) == {key: b"theirs"}
        uploads = theirs.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix).get("Uploads", [])
        assert uploads == []
        assert [m for m, p, _ in proxy.requests if "uploadId=" in p][-1] == "DELETE"


class TestBadInput:
    """Bad credentials, unknown bucket, endpoint down: clear errors, nothing written."""

    def test_wrong_secret(self, s3_server: S3Server, prefix: str, tmp_path: Path) -> None:
        """A wrong secret is refused at once (not retried) with an access-denied message
        naming the credentials file and never the secret."""
        wrong = "wrong-" + s3_server.secret_key[::-1]
        path = s3_server.write_credentials(tmp_path / "c.json", secret=wrong)
        bucket = S3Bucket(load_credentials(path), BUCKET, retry=FAST_RETRY)
        with pytest.raises(ObjectRequestError) as info:
            bucket.put(f"{prefix}/k", b"x")
        message = str(info.value)
        assert message.startswith(f"{bucket.describe()}: put '{prefix}/k' failed (")
        assert "SignatureDoesNotMatch 403" in message
        assert message.endswith(
            f"Access denied to {bucket.describe()} for key id ...{s3_server.access_key[-4:]}: "
            f"check aws_access_key_id and aws_secret_access_key in credentials file {path} "
            "and the key's permissions on the bucket"
        )
        assert wrong not in message
        assert s3_server.access_key not in message
        assert_no_secret(s3_server, info.value)
        assert remote(s3_server, prefix) == {}

    def test_unknown_bucket(self, credentials: S3Credentials, s3_server: S3Server) -> None:
        """A PUT into a bucket that does not exist names it and is not auto-created."""
        bucket = S3Bucket(credentials, "missing-bucket", retry=FAST_RETRY)
        with pytest.raises(ObjectRequestError) as info:
            bucket.put("k", b"x")
        assert str(info.value).endswith(
            "Bucket 'missing-bucket' does not exist: create it or fix the bucket name"
        )
        names = [b["Name"] for b in s3_server.client().list_buckets()["Buckets"]]
        assert "missing-bucket" not in names

    def test_endpoint_down(self, s3_server: S3Server, tmp_path: Path) -> None:
        """Nothing listening at the endpoint: ObjectRequestError after the bounded attempts
        naming the endpoint and the fix."""
        (port,) = free_ports(1)
        path = s3_server.write_credentials(
            tmp_path / "c.json", endpoint_url=f"http://127.0.0.1:{port}"
        )
        bucket = S3Bucket(load_credentials(path), BUCKET, retry=FAST_RETRY, connect_timeout_s=1)
        with pytest.raises(ObjectRequestError) as info:
            bucket.get("k")
        assert str(info.value) == (
            f"s3://{BUCKET} at 127.0.0.1:{port}: get 'k' failed after 4 attempt(s) "
            "(EndpointConnectionError: could not connect to the endpoint). Check endpoint_url "
            f"in credentials file {path} and that the service at 127.0.0.1:{port} is running "
            "and reachable"
        )
        assert_no_secret(s3_server, info.value)


class TestSecrets:
    """The secret key never reaches a message, even when a server echoes it."""

    def test_a_message_echoing_the_secret_is_scrubbed(
        self, bucket: S3Bucket, s3_server: S3Server
    ) -> None:
        """A failure whose server message quotes the secret ends in an error showing ***."""
        echoed = Failure(500, "InternalError", True, f"bad key {s3_server.secret_key}")
        error = bucket.failed("put", "k", echoed, 3)
        assert "bad key ***" in str(error)
        assert_no_secret(s3_server, error)

    def test_reprs_hold_no_secret(self, bucket: S3Bucket, s3_server: S3Server) -> None:
        """The bucket's and the credentials' repr and identity name the key id only."""
        for text in (repr(bucket), repr(bucket.credentials), str(bucket.identity())):
            assert s3_server.secret_key not in text
            assert s3_server.access_key in text


class TestObjectStoreOverS3:
    """The ObjectStore adapter behaves over S3Bucket as over SimBucket."""

    def test_store_operations(self, bucket: S3Bucket, s3_server: S3Server, prefix: str) -> None:
        """write/read/list/stat/delete_tree map to keys under the prefix."""
        store = ObjectStore(bucket, prefix=prefix, name=BUCKET)
        for path in ["a.txt", "dir/x", "dir/y", "dir/sub/z", "dirty"]:
            store.write_atomic(path, path.encode())
        assert store.read_bytes("dir/x") == b"dir/x"
        assert store.list() == ["a.txt", "dir", "dirty"]
        assert store.list("dir") == ["sub", "x", "y"]
        assert store.stat("dir/x") == FileStat(5, False)
        assert store.stat("dir") == FileStat(0, True)
        assert store.stat("di") is None
        store.delete_tree("dir")
        store.delete("a.txt")
        assert store.list() == ["dirty"]
        assert remote(s3_server, prefix) == {f"{prefix}/dirty": b"dirty"}

    def test_create_exclusive_refuses_existing_key(
        self, bucket: S3Bucket, s3_server: S3Server, prefix: str
    ) -> None:
        """create_exclusive of an existing path is StoreConflictError; the object stays."""
        store = ObjectStore(bucket, prefix=prefix, name=BUCKET)
        store.create_exclusive("marker", b"first")
        with pytest.raises(StoreConflictError) as info:
            store.create_exclusive("marker", b"second")
        assert str(info.value) == (
            f"s3://{BUCKET}/{prefix}: 'marker' already exists; an exclusive create never "
            "overwrites. Inspect the existing object before deciding what to do"
        )
        assert remote(s3_server, prefix) == {f"{prefix}/marker": b"first"}


@pytest.mark.slow
class TestServerCrash:
    """SIGKILL of the object store: the data survives, requests while it is down fail
    clearly, and requests after the restart succeed."""

    def test_sigkill_and_restart_keeps_the_data(
        self, s3_server: S3Server, credentials: S3Credentials, prefix: str, tmp_path: Path
    ) -> None:
        """Objects written before a SIGKILL are there after the restart, byte for byte."""
        bucket = S3Bucket(credentials, BUCKET, retry=FAST_RETRY, transfer=TransferSettings(5 * MIB))
        data = os.urandom(7 * MIB)
        (tmp_path / "f").write_bytes(data)
        bucket.put(f"{prefix}/small", b"small")
        bucket.put_file(f"{prefix}/big", tmp_path / "f")
        s3_server.kill()
        try:
            with pytest.raises(ObjectRequestError, match="is running and reachable"):
                bucket.get(f"{prefix}/small")
        finally:
            s3_server.start()
        assert bucket.get(f"{prefix}/small") == b"small"
        assert bucket.get(f"{prefix}/big") == data
        bucket.put(f"{prefix}/after", b"after", if_none_match=True)
        assert sorted(remote(s3_server, prefix)) == [
            f"{prefix}/after",
            f"{prefix}/big",
            f"{prefix}/small",
        ]

    def test_sigkill_mid_upload(
        self, proxy: FaultProxy, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """The server is SIGKILLed as the multipart completion arrives and restarted: the
        upload's retries ride out the outage and the object is the file."""
        path = s3_server.write_credentials(tmp_path / "c.json", endpoint_url=proxy.endpoint_url)
        patient = RetryPolicy(attempts=60, base_delay_s=0.1, max_delay_s=0.5)
        bucket = S3Bucket(
            load_credentials(path), BUCKET, retry=patient, transfer=TransferSettings(5 * MIB)
        )
        restarted = threading.Event()

        def crash() -> None:
            s3_server.kill()
            threading.Thread(target=lambda: (s3_server.start(), restarted.set())).start()

        proxy.clear()
        proxy.inject(Fault.HOOK, method="POST", path_contains="uploadId=", hook=crash)
        data = os.urandom(6 * MIB)
        (tmp_path / "f").write_bytes(data)
        try:
            bucket.put_file(f"{prefix}/f", tmp_path / "f", if_none_match=True)
        finally:
            assert restarted.wait(60)
            completions = [o for m, p, o in proxy.requests if m == "POST" and "uploadId=" in p]
            proxy.clear()
        assert completions[0] == "upstream_down"
        assert completions[-1] == "200"
        assert remote(s3_server, prefix) == {f"{prefix}/f": data}


class TestCredentials:
    """load_credentials: validation with clear errors that never echo the secret."""

    SECRET = "do-not-print-me-123"

    def write(self, tmp_path: Path, content: object) -> Path:
        path = tmp_path / "creds.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        return path

    def good(self) -> dict[str, str]:
        return {
            "endpoint_url": "https://s3.example.com:9000/",
            "region": "eu-west-1",
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": self.SECRET,
        }

    def test_valid_file(self, tmp_path: Path) -> None:
        """A valid file loads; repr and the redacted identity hold no secret."""
        creds = load_credentials(self.write(tmp_path, self.good()))
        assert creds.aws_secret_access_key == self.SECRET
        assert self.SECRET not in repr(creds)
        assert creds.redacted("ckpt-bucket") == S3Identity(
            "s3.example.com:9000", "ckpt-bucket", "AKIDEXAMPLE"
        )
        assert str(creds.redacted("ckpt-bucket")) == (
            "s3.example.com:9000/ckpt-bucket (key id AKIDEXAMPLE)"
        )
        assert self.SECRET not in repr(S3Bucket(creds, "ckpt-bucket"))

    @pytest.mark.parametrize(
        ("content", "problem"),
        [
            (None, "no such file; write the JSON credentials file there"),
            ('{"endpoint_url": "x", ' + SECRET, "is not valid JSON (line 1, column 23)"),
            ([1], "must hold a JSON object, got a list"),
            (
                '{"region": "r", "aws_access_key_id": "AKID"}',
                "missing key(s) aws_secret_access_key; aws_access_key_id and "
                "aws_secret_access_key go together",
            ),
            ('{"aws_session_token": "t"}', "aws_session_token needs aws_access_key_id and"),
            ({"profile": "training"}, "give profile or the keys, not both"),
            ({"aws_secret_access_key": 7}, "key(s) aws_secret_access_key must be non-empty"),
            ({"extra": SECRET}, "unknown key(s) extra; expected only endpoint_url"),
            ({"endpoint_url": "s3.example.com"}, "endpoint_url 's3.example.com' must be an"),
            ({"endpoint_url": "http://u:p@h"}, "endpoint_url must not carry a user or password"),
        ],
    )
    def test_bad_files(self, tmp_path: Path, content: object, problem: str) -> None:
        """Each malformed file raises CredentialsError naming the file and the problem,
        never quoting the secret."""
        if content is None:
            path = tmp_path / "absent.json"
        elif isinstance(content, dict) and len(content) == 1:
            path = self.write(tmp_path, {**self.good(), **content})
        else:
            path = self.write(tmp_path, content)
        with pytest.raises(CredentialsError) as info:
            load_credentials(path)
        assert str(info.value).startswith(f"credentials file {path}: {problem}")
        assert info.value.path == str(path)  # type: ignore[attr-defined]
        assert self.SECRET not in str(info.value)


class TestTransferHashing:
    """The digests of transfers: downloads hash the ranges in file order as they land,
    one-part uploads reuse a digest the caller passes, the defaults are boto3's."""

    @pytest.fixture
    def ranged(self, credentials: S3Credentials) -> S3Bucket:
        """Small parts, three in flight: a 13 MiB object is three ranges landing in any order."""
        return S3Bucket(credentials, BUCKET, transfer=TransferSettings(5 * MIB, concurrency=3))

    def test_multirange_download_refuses_a_wrong_stored_sha256(
        self, ranged: S3Bucket, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """Every byte arrives, but the sha256 stored with the object is of other bytes: the
        error names both digests and nothing is placed (no temporary either)."""
        data = os.urandom(13 * MIB)
        wrong = hashlib.sha256(b"other bytes").hexdigest()
        s3_server.client().put_object(
            Bucket=BUCKET, Key=f"{prefix}/k", Body=data, Metadata={"sha256": wrong}
        )
        with pytest.raises(ObjectRequestError) as info:
            ranged.download(f"{prefix}/k", tmp_path / "out")
        assert hashlib.sha256(data).hexdigest() in str(info.value)
        assert wrong in str(info.value)
        assert list(tmp_path.iterdir()) == []

    def test_multirange_download_matches_the_whole_file_digest(
        self, ranged: S3Bucket, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """The in-order digest of three ranges equals the file's sha256 (the download is
        accepted); an object without a stored digest downloads by size alone."""
        data = os.urandom(13 * MIB + 7)
        source = tmp_path / "src"
        source.write_bytes(data)
        ranged.put_file(f"{prefix}/k", source)
        fetched = ranged.download(f"{prefix}/k", tmp_path / "back")
        assert fetched.sha256 == hashlib.sha256(data).hexdigest()
        assert (tmp_path / "back").read_bytes() == data
        s3_server.client().put_object(Bucket=BUCKET, Key=f"{prefix}/plain", Body=data)
        assert ranged.download(f"{prefix}/plain", tmp_path / "plain").sha256 == ""
        assert (tmp_path / "plain").read_bytes() == data
        assert sorted(p.name for p in tmp_path.iterdir()) == ["back", "plain", "src"]

    def test_one_part_put_file_stores_a_given_sha256(
        self, bucket: S3Bucket, prefix: str, tmp_path: Path
    ) -> None:
        """put_file of a one-part file with the digest passed stores that digest without
        hashing again (so a wrong one is stored as given); without it, the file's own."""
        source = tmp_path / "small"
        source.write_bytes(b"payload")
        right = hashlib.sha256(b"payload").hexdigest()
        bucket.put_file(f"{prefix}/a", source)
        bucket.put_file(f"{prefix}/b", source, sha256="0" * 64)
        assert bucket.put_bytes(f"{prefix}/c", b"payload", sha256=right)
        stored = {k: bucket.stat(f"{prefix}/{k}") for k in "abc"}
        assert {k: (v.sha256 if v else None) for k, v in stored.items()} == {
            "a": right,
            "b": "0" * 64,
            "c": right,
        }

    def test_defaults_are_boto3s(self) -> None:
        """8 MiB parts, 10 in flight (boto3's TransferConfig), 80 MiB of parts held."""
        settings = TransferSettings()
        assert (settings.part_size, settings.concurrency) == (8 * MIB, 10)
