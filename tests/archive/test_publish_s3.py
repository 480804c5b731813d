"""publish_artifact against the real S3 server (SeaweedFS, the ``s3_server`` fixture), with faults
injected by the loopback proxy (tests/s3_proxy.py): layout and receipt, ambiguous and failed
requests, the server SIGKILLed mid-publish, refusals that touch nothing, bad credentials."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from artifact_files import default_payloads
from s3_proxy import Fault, FaultProxy
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.archive.declaration import DECLARATION_NAME, read_declaration
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.marker import UploadedMarker, read_marker
from statecraft.checkpoint.archive.publish_bindings import publish_artifact
from statecraft.checkpoint.artifacts.bindings import ArtifactContext
from statecraft.checkpoint.kernel.components import ComponentPlan
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME, iter_dirname
from statecraft.checkpoint.kernel.machines import shipped_machine
from statecraft.errors import (
    ArchiveError,
    ArchiveMismatchError,
    CheckpointCorruptError,
    ObjectRequestError,
)
from statecraft.storage.local import LocalStore
from statecraft.storage.s3 import RetryPolicy, S3Bucket
from statecraft.storage.s3_credentials import load_credentials

FAST_RETRY = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05)
ITER = 7
PLAN = ("model", "optimizer")


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:50]
    return f"pub/{name}-{uuid.uuid4().hex[:8]}/checkpoints"


@pytest.fixture(autouse=True)
def no_secret_logged(caplog: pytest.LogCaptureFixture, s3_server: S3Server) -> Iterator[None]:
    """No log line of these tests holds the server's secret key."""
    caplog.set_level(logging.DEBUG, logger="statecraft")
    yield
    leaked = [r.getMessage() for r in caplog.records if s3_server.secret_key in r.getMessage()]
    assert leaked == []


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server) -> S3Bucket:
    return S3Bucket(load_credentials(s3_server.credentials_file), BUCKET, retry=FAST_RETRY)


@pytest.fixture(scope="module")
def proxied_bucket(
    proxy: FaultProxy, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> S3Bucket:
    path = s3_server.write_credentials(
        tmp_path_factory.mktemp("publish") / "proxy.json", endpoint_url=proxy.endpoint_url
    )
    return S3Bucket(load_credentials(path), BUCKET, retry=FAST_RETRY, read_timeout_s=10)


@pytest.fixture
def faulty(proxy: FaultProxy, proxied_bucket: S3Bucket) -> Iterator[S3Bucket]:
    proxy.clear()
    yield proxied_bucket
    proxy.clear()


def save_artifact(root: Path, *, seed: int = 0) -> LocalStore:
    """Commit artifact ITER (model + optimizer) under ``root`` by the production artifact save."""
    store = LocalStore(str(root))
    plan = ComponentPlan.of(PLAN)
    payloads = default_payloads(plan, ITER, seed=seed)
    ctx = ArtifactContext(
        store=store,
        plan=plan,
        iteration=ITER,
        payloads={name: (lambda value=value: value) for name, value in payloads.items()},
    )
    shipped_machine("artifact").recover(ctx).raise_for_failure()
    return store


def remote(server: S3Server, prefix: str) -> dict[str, bytes]:
    """Ground truth read with a plain boto3 client: every object under ``prefix``."""
    client = server.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def artifact_keys(destination: ArchiveDestination) -> str:
    return destination.artifact_prefix(ITER)


def local_files(store: LocalStore) -> dict[str, bytes]:
    root = Path(store.root) / iter_dirname(ITER)
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def puts(proxy: FaultProxy) -> list[str]:
    return [path for method, path, _ in proxy.requests if method == "PUT"]


class TestPublish:
    def test_layout_receipt_and_idempotent_rerun(
        self, bucket: S3Bucket, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """The remote iter_N mirrors the local artifact plus the declaration; .uploaded is a
        kind-artifact receipt binding this endpoint and bucket with every sha256; a rerun
        uploads nothing and writes the same receipt."""
        store = save_artifact(tmp_path / "artifacts")
        destination = ArchiveDestination(bucket, prefix)
        report = publish_artifact(store, ITER, destination)
        base = artifact_keys(destination)
        assert (
            base
            == prefix.removesuffix("/checkpoints") + f"/checkpoint_artifacts/{iter_dirname(ITER)}"
        )
        assert report.remote_prefix == base
        local = local_files(store)
        marker = read_marker(store, iter_dirname(ITER))
        assert isinstance(marker, UploadedMarker)
        assert marker == report.marker
        assert marker.kind == "artifact"
        assert marker.iteration == ITER
        assert marker.destination.binds(bucket.identity())
        assert marker.destination.prefix == base
        assert {e.path for e in marker.files} == set(local) - {".uploaded"}
        assert all(e.sha256 for e in marker.files)
        there = remote(s3_server, base + "/")
        assert set(there) == {f"{base}/{n}" for n in local if n != ".uploaded"} | {
            f"{base}/{DECLARATION_NAME}"
        }
        for name, data in local.items():
            if name != ".uploaded":
                assert there[f"{base}/{name}"] == data
        declaration = read_declaration(bucket, f"{base}/{DECLARATION_NAME}")
        assert declaration.files == marker.files
        assert s3_server.secret_key.encode() not in there[f"{base}/{DECLARATION_NAME}"]
        assert s3_server.access_key.encode() not in there[f"{base}/{DECLARATION_NAME}"]
        assert (report.files, report.uploaded, report.skipped) == (3, 3, 0)
        again = publish_artifact(store, ITER, destination)
        assert (again.uploaded, again.skipped, again.bytes_uploaded) == (0, 3, 0)
        assert again.marker == marker

    @pytest.mark.parametrize("name", [DECLARATION_NAME, ARTIFACT_MANIFEST_NAME])
    def test_lost_response_on_a_conditional_create(
        self,
        faulty: S3Bucket,
        proxy: FaultProxy,
        s3_server: S3Server,
        prefix: str,
        tmp_path: Path,
        name: str,
    ) -> None:
        """A conditional create the server applied but whose response was lost is resolved
        as ours: the publish completes, the object holds our bytes."""
        store = save_artifact(tmp_path / "artifacts")
        destination = ArchiveDestination(faulty, prefix)
        proxy.inject(Fault.LOST_RESPONSE, method="PUT", path_contains=name)
        publish_artifact(store, ITER, destination)
        assert any(o == "lost_response" for _, p, o in proxy.requests if name in p)
        there = remote(s3_server, artifact_keys(destination) + "/")
        if name == ARTIFACT_MANIFEST_NAME:
            assert there[f"{artifact_keys(destination)}/{name}"] == local_files(store)[name]
        assert read_marker(store, iter_dirname(ITER))

    @pytest.mark.parametrize(
        "fault", [Fault.SLOWDOWN, Fault.INTERNAL_ERROR, Fault.DROP_MID_BODY, Fault.LOST_RESPONSE]
    )
    def test_payload_put_faults_are_ridden_out(
        self,
        faulty: S3Bucket,
        proxy: FaultProxy,
        s3_server: S3Server,
        prefix: str,
        tmp_path: Path,
        fault: Fault,
    ) -> None:
        """Throttling, 500s, a response cut mid-body and a lost response on payload PUTs are
        retried: the publish completes with every object intact."""
        store = save_artifact(tmp_path / "artifacts")
        destination = ArchiveDestination(faulty, prefix)
        proxy.inject(fault, method="PUT", path_contains="model.pt", times=2)
        report = publish_artifact(store, ITER, destination)
        # (a PUT's response has no body: a cut "mid-body" reaches the client whole, once)
        assert [o for _, p, o in proxy.requests if "model.pt" in p].count(fault.value) >= 1
        base = artifact_keys(destination)
        there = remote(s3_server, base + "/")
        for name, data in local_files(store).items():
            if name != ".uploaded":
                assert there[f"{base}/{name}"] == data
        assert report.marker.files == read_declaration(faulty, f"{base}/{DECLARATION_NAME}").files

    def test_server_killed_mid_publish_then_rerun_completes(
        self,
        faulty: S3Bucket,
        proxy: FaultProxy,
        s3_server: S3Server,
        prefix: str,
        tmp_path: Path,
    ) -> None:
        """The server is SIGKILLed as the second payload PUT arrives: the publish fails with no
        receipt and no remote manifest; after the restart the rerun resumes and completes."""
        store = save_artifact(tmp_path / "artifacts")
        destination = ArchiveDestination(faulty, prefix)
        proxy.inject(Fault.HOOK, method="PUT", path_contains="optim.pt", hook=s3_server.kill)
        try:
            with pytest.raises(ObjectRequestError):
                publish_artifact(store, ITER, destination)
        finally:
            s3_server.start()
        base = artifact_keys(destination)
        assert store.stat(f"{iter_dirname(ITER)}/.uploaded") is None
        there = remote(s3_server, base + "/")
        assert f"{base}/{DECLARATION_NAME}" in there
        assert f"{base}/{ARTIFACT_MANIFEST_NAME}" not in there
        proxy.clear()
        report = publish_artifact(store, ITER, destination)
        assert report.skipped >= 1
        assert set(remote(s3_server, base + "/")) == {
            f"{base}/{n}"
            for n in (DECLARATION_NAME, ARTIFACT_MANIFEST_NAME, "model.pt", "optim.pt")
        }


def _declared_then_failed(
    store: LocalStore, destination: ArchiveDestination, proxy: FaultProxy
) -> None:
    """A publish that declared its inventory and then failed on every payload PUT."""
    proxy.inject(Fault.INTERNAL_ERROR, method="PUT", path_contains="model.pt", times=50)
    with pytest.raises(ObjectRequestError):
        publish_artifact(store, ITER, destination)
    proxy.clear()


class TestRefusals:
    def test_a_different_inventory_is_refused_with_nothing_touched(
        self,
        faulty: S3Bucket,
        proxy: FaultProxy,
        s3_server: S3Server,
        prefix: str,
        tmp_path: Path,
    ) -> None:
        """After a crashed publish, the artifact re-saved with other bytes is refused with
        ArchiveMismatchError before any PUT; remote and local stay as they were."""
        destination = ArchiveDestination(faulty, prefix)
        _declared_then_failed(save_artifact(tmp_path / "first"), destination, proxy)
        base = artifact_keys(destination)
        before = remote(s3_server, base + "/")
        other = save_artifact(tmp_path / "second", seed=1)
        local = local_files(other)
        with pytest.raises(ArchiveMismatchError, match=r"model\.pt: declared size") as info:
            publish_artifact(other, ITER, destination)
        assert "no payload was touched" in str(info.value)
        assert puts(proxy) == []
        assert remote(s3_server, base + "/") == before
        assert local_files(other) == local

    def test_tampered_local_payload_after_declaration_is_refused(
        self,
        faulty: S3Bucket,
        proxy: FaultProxy,
        s3_server: S3Server,
        prefix: str,
        tmp_path: Path,
    ) -> None:
        """A local payload altered after the declaration (same size) is refused before any
        PUT, naming the file; nothing local is changed or removed."""
        store = save_artifact(tmp_path / "artifacts")
        destination = ArchiveDestination(faulty, prefix)
        _declared_then_failed(store, destination, proxy)
        path = Path(store.root) / iter_dirname(ITER) / "model.pt"
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
        before = remote(s3_server, artifact_keys(destination) + "/")
        with pytest.raises(ArchiveError, match=r"model\.pt: is .* the artifact manifest records"):
            publish_artifact(store, ITER, destination)
        assert puts(proxy) == []
        assert remote(s3_server, artifact_keys(destination) + "/") == before
        assert path.read_bytes() == bytes(data)
        assert store.stat(f"{iter_dirname(ITER)}/.uploaded") is None

    def test_malformed_remote_declaration(
        self, bucket: S3Bucket, s3_server: S3Server, prefix: str, tmp_path: Path
    ) -> None:
        """A malformed declaration is a clear CheckpointCorruptError naming its s3:// URI;
        nothing is uploaded."""
        store = save_artifact(tmp_path / "artifacts")
        destination = ArchiveDestination(bucket, prefix)
        key = f"{artifact_keys(destination)}/{DECLARATION_NAME}"
        bucket.put(key, b'{"schema": "statecraft.archive-declaration.v1", "files": 3}')
        with pytest.raises(CheckpointCorruptError) as info:
            publish_artifact(store, ITER, destination)
        assert str(info.value).startswith(f"s3://{BUCKET}/{key}: archive declaration violates")
        assert "never replaces it" in str(info.value)
        assert list(remote(s3_server, artifact_keys(destination) + "/")) == [key]

    def test_server_ignoring_if_none_match_is_refused(
        self,
        faulty: S3Bucket,
        proxy: FaultProxy,
        s3_server: S3Server,
        prefix: str,
        tmp_path: Path,
    ) -> None:
        """A server that accepts a conditional create over an existing object (emulated: a
        HOOK removes the declaration just before each probe reaches the server) is refused
        before any payload PUT."""
        store = save_artifact(tmp_path / "artifacts")
        destination = ArchiveDestination(faulty, prefix)
        key = f"{artifact_keys(destination)}/{DECLARATION_NAME}"
        client = s3_server.client()
        seen = []

        def forget() -> None:
            seen.append(1)
            if len(seen) > 1:  # the create goes through; each probe finds no object
                client.delete_object(Bucket=BUCKET, Key=key)

        proxy.inject(Fault.HOOK, method="PUT", path_contains=DECLARATION_NAME, times=3, hook=forget)
        with pytest.raises(ArchiveError, match="does not honour conditional writes"):
            publish_artifact(store, ITER, destination)
        assert [p for p in puts(proxy) if DECLARATION_NAME not in p] == []
        assert list(remote(s3_server, artifact_keys(destination) + "/")) == [key]
        assert store.stat(f"{iter_dirname(ITER)}/.uploaded") is None

    def test_wrong_credentials(self, s3_server: S3Server, prefix: str, tmp_path: Path) -> None:
        """A wrong secret fails with a clear access-denied error that never holds the secret;
        nothing local changes."""
        store = save_artifact(tmp_path / "artifacts")
        wrong = "wrong-" + s3_server.secret_key[::-1]
        path = s3_server.write_credentials(tmp_path / "c.json", secret=wrong)
        bucket = S3Bucket(load_credentials(path), BUCKET, retry=FAST_RETRY)
        local = local_files(store)
        with pytest.raises(ObjectRequestError, match="Access denied") as info:
            publish_artifact(store, ITER, ArchiveDestination(bucket, prefix))
        assert wrong not in str(info.value)
        assert s3_server.secret_key not in str(info.value)
        assert local_files(store) == local

    def test_unknown_bucket(self, s3_server: S3Server, prefix: str, tmp_path: Path) -> None:
        """A bucket that does not exist is named in the error; nothing local changes."""
        store = save_artifact(tmp_path / "artifacts")
        bucket = S3Bucket(
            load_credentials(s3_server.credentials_file), "missing-bucket", retry=FAST_RETRY
        )
        with pytest.raises(ObjectRequestError, match="'missing-bucket' does not exist"):
            publish_artifact(store, ITER, ArchiveDestination(bucket, prefix))
        assert store.stat(f"{iter_dirname(ITER)}/.uploaded") is None
