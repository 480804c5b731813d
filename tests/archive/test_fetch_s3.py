"""fetch_archive and prune_verified against the real S3 server (SeaweedFS): an artifact and a
full checkpoint come back byte for byte; a tampered payload is never placed; prune-verified
releases only what is proven archived and says why it keeps anything else."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fetch_trees import archive, make_artifact, make_checkpoint, mark, tree
from s3_proxy import Fault, FaultProxy
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.archive.fetch_bindings import fetch_archive
from statecraft.checkpoint.archive.prune import prune_verified
from statecraft.checkpoint.kernel.artifact_catalog import ArtifactState, scan_artifacts
from statecraft.checkpoint.kernel.artifact_release import RELEASE_NAME
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.checkpoint.resume.rules import artifact_refusal
from statecraft.errors import ArchiveError, FetchDestinationExistsError, ObjectRequestError
from statecraft.storage.local import LocalStore
from statecraft.storage.s3 import RetryPolicy, S3Bucket
from statecraft.storage.s3_credentials import S3Identity, load_credentials

FAST_RETRY = RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.02)


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
    return S3Bucket(load_credentials(s3_server.credentials_file), BUCKET, retry=FAST_RETRY)


@pytest.fixture
def prefix() -> str:
    return f"fetch/{uuid.uuid4().hex[:10]}/run/checkpoints"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    run = tmp_path_factory.mktemp("src") / "run"
    return make_artifact(run), make_checkpoint(run)


def _artifact_prefix(prefix: str, directory: Path) -> str:
    return f"{prefix.rsplit('/', 1)[0]}/checkpoint_artifacts/{directory.name}"


class TestFetch:
    def test_artifact_and_checkpoint_come_back_byte_for_byte(
        self, bucket: S3Bucket, prefix: str, trees, tmp_path: Path
    ) -> None:
        """Both kinds are placed at dst/iter_N exactly as archived, with no staging left."""
        artifact, checkpoint = trees
        a_key, c_key = _artifact_prefix(prefix, artifact), f"{prefix}/{checkpoint.name}"
        archive(bucket, artifact, a_key)
        archive(bucket, checkpoint, c_key)
        dst = LocalStore(str(tmp_path / "dst"))
        got = fetch_archive(bucket, a_key, dst, artifact.name)
        assert got.kind == "artifact"
        assert got.files == len(tree(artifact))
        assert tree(Path(got.path)) == tree(artifact)
        got = fetch_archive(bucket, c_key, dst, checkpoint.name)
        assert got.kind == "checkpoint"
        assert tree(Path(got.path)) == tree(checkpoint)
        assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == sorted(
            [artifact.name, checkpoint.name]
        )
        with pytest.raises(FetchDestinationExistsError, match="never overwrites"):
            fetch_archive(bucket, a_key, dst, artifact.name)

    def test_tampered_payload_is_never_placed(
        self, bucket: S3Bucket, prefix: str, trees, tmp_path: Path
    ) -> None:
        """A payload replaced remotely (same size, other bytes) fails the fetch with the
        object named; nothing is placed and no staging is left."""
        artifact, _ = trees
        key = _artifact_prefix(prefix, artifact)
        archive(bucket, artifact, key)
        data = (artifact / "model.pt").read_bytes()
        bucket.client.put_object(
            Bucket=BUCKET, Key=f"{key}/model.pt", Body=data[:-4] + b"XXXX"
        )  # a foreign writer: no sha256 metadata
        with pytest.raises(ArchiveError, match=r"model\.pt.*sha256"):
            fetch_archive(bucket, key, LocalStore(str(tmp_path / "dst")), artifact.name)
        assert list((tmp_path / "dst").iterdir()) == []

    def test_prefix_without_commit_record_is_refused(
        self, bucket: S3Bucket, prefix: str, trees, tmp_path: Path
    ) -> None:
        """An upload that never committed (no manifest) is refused before any download."""
        _, _checkpoint = trees
        bucket.put(f"{prefix}/iter_000000002/model.pt", b"half")
        with pytest.raises(ArchiveError, match="no commit record"):
            fetch_archive(bucket, f"{prefix}/iter_000000002", LocalStore(str(tmp_path)), "x")
        assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def proxy(s3_server: S3Server):
    proxy = FaultProxy(s3_server.s3_port)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(scope="module")
def proxied(proxy: FaultProxy, s3_server: S3Server, tmp_path_factory) -> S3Bucket:
    path = s3_server.write_credentials(
        tmp_path_factory.mktemp("fetch-proxy") / "proxy.json", endpoint_url=proxy.endpoint_url
    )
    return S3Bucket(load_credentials(path), BUCKET, retry=FAST_RETRY)


class TestFetchFaults:
    def test_connection_dropped_mid_body_places_nothing_then_retry_places(
        self, bucket: S3Bucket, proxied: S3Bucket, proxy: FaultProxy, prefix, trees, tmp_path
    ) -> None:
        """Every GET of a payload cut mid-body: the fetch fails after its retries with nothing
        placed and no staging left; the rerun places the complete copy."""
        _, checkpoint = trees
        key = f"{prefix}/{checkpoint.name}"
        archive(bucket, checkpoint, key)
        proxy.clear()
        proxy.inject(Fault.DROP_MID_BODY, method="GET", path_contains="optim.pt", times=50)
        dst = LocalStore(str(tmp_path / "dst"))
        with pytest.raises(ObjectRequestError):
            fetch_archive(proxied, key, dst, checkpoint.name)
        assert list((tmp_path / "dst").iterdir()) == []
        proxy.clear()
        got = fetch_archive(proxied, key, dst, checkpoint.name)
        assert tree(Path(got.path)) == tree(checkpoint)

    def test_object_replaced_during_the_fetch_is_never_placed(
        self, bucket: S3Bucket, proxied: S3Bucket, proxy: FaultProxy, prefix, trees, tmp_path
    ) -> None:
        """A foreign writer replaces a payload (same size) just before it is read: the sha256
        proof fails and nothing is placed."""
        artifact, _ = trees
        key = _artifact_prefix(prefix, artifact)
        archive(bucket, artifact, key)
        data = (artifact / "optim.pt").read_bytes()

        def replace() -> None:
            bucket.client.put_object(Bucket=BUCKET, Key=f"{key}/optim.pt", Body=data[::-1])

        proxy.clear()
        proxy.inject(Fault.HOOK, method="GET", path_contains="optim.pt", hook=replace)
        with pytest.raises((ArchiveError, ObjectRequestError)):
            fetch_archive(proxied, key, LocalStore(str(tmp_path / "dst")), artifact.name)
        proxy.clear()
        assert list((tmp_path / "dst").iterdir()) == []


def _marked(bucket: S3Bucket, prefix: str, tmp_path: Path) -> tuple[Path, str]:
    artifact = make_artifact(tmp_path / "run")
    key = _artifact_prefix(prefix, artifact)
    mark(artifact, bucket, key, archive(bucket, artifact, key))
    return artifact, key


class TestPruneVerified:
    def test_prunes_when_everything_is_proven(
        self, bucket: S3Bucket, prefix: str, tmp_path: Path
    ) -> None:
        """Payloads go, manifest and marker stay, the release record names the archive and
        the catalog reports the artifact released (counted, not corrupt); a rerun is a no-op."""
        artifact, key = _marked(bucket, prefix, tmp_path)
        size = sum(len(b) for n, b in tree(artifact).items() if n.endswith(".pt"))
        decision = prune_verified(artifact, bucket)
        assert decision.pruned, decision
        assert decision.freed_bytes == size
        assert sorted(p.name for p in artifact.iterdir()) == sorted(
            [ARTIFACT_MANIFEST_NAME, ".uploaded", RELEASE_NAME]
        )
        entry = scan_artifacts(LocalStore(str(artifact.parent))).entries[0]
        assert entry.state is ArtifactState.RELEASED
        assert entry.counts
        assert f"s3://{BUCKET}/{key}" in entry.reason
        again = prune_verified(artifact, bucket)
        assert again.pruned
        assert again.freed_bytes == 0
        catalog = scan_artifacts(LocalStore(str(artifact.parent)), level="manifest")
        refusal = artifact_refusal(
            catalog.newest_with_manifest(), source="resume=auto", checkpoint="c", iteration=2
        )
        assert refusal is not None  # still counted: resuming behind it is refused
        assert "released (archived at s3://" in str(refusal)

    @pytest.mark.parametrize("damage", ["altered", "deleted", "local-changed"])
    def test_refuses_when_a_copy_does_not_match(
        self, bucket: S3Bucket, prefix: str, tmp_path: Path, damage: str
    ) -> None:
        """An altered or deleted remote object, or changed local bytes: kept, with why."""
        artifact, key = _marked(bucket, prefix, tmp_path)
        if damage == "altered":
            bucket.client.put_object(Bucket=BUCKET, Key=f"{key}/optim.pt", Body=b"other")
        elif damage == "deleted":
            bucket.delete(f"{key}/optim.pt")
        else:
            with open(artifact / "model.pt", "r+b") as f:
                f.write(b"\0")
        before = tree(artifact)
        decision = prune_verified(artifact, bucket)
        assert not decision.pruned
        expected = {"altered": "was altered", "deleted": "is gone", "local-changed": "changed"}
        assert expected[damage] in decision.reason
        assert tree(artifact) == before

    @pytest.mark.parametrize("marker", ["legacy", "malformed", "other-bucket", "none"])
    def test_refuses_a_marker_that_proves_nothing_here(
        self, bucket: S3Bucket, prefix: str, tmp_path: Path, marker: str
    ) -> None:
        """A legacy or malformed marker, one binding another bucket, or none: kept."""
        artifact, key = _marked(bucket, prefix, tmp_path)
        path = artifact / ".uploaded"
        if marker == "legacy":
            path.write_text(f"s3://{BUCKET}/{key}\n")
        elif marker == "malformed":
            path.write_text('{"schema": "statecraft.archive-marker.v1", "kind": 3}')
        elif marker == "other-bucket":
            raw = json.loads(path.read_text())
            raw["destination"]["bucket"] = "other-bucket"
            path.write_text(json.dumps(raw))
        else:
            path.unlink()
        before = tree(artifact)
        decision = prune_verified(artifact, bucket)
        assert not decision.pruned
        expected = {
            "legacy": "legacy",
            "malformed": "malformed",
            "other-bucket": "other-bucket",
            "none": "no .uploaded",
        }
        assert expected[marker] in decision.reason
        assert tree(artifact) == before

    def test_wrong_endpoint_is_refused(self, bucket: S3Bucket, prefix: str, tmp_path: Path) -> None:
        """Credentials addressing another endpoint never prune (the marker binds this one)."""
        artifact, _ = _marked(bucket, prefix, tmp_path)

        class Elsewhere:
            def identity(self) -> S3Identity:
                return S3Identity("elsewhere:9000", BUCKET, "k")

        decision = prune_verified(artifact, Elsewhere())  # type: ignore[arg-type]
        assert not decision.pruned
        assert "elsewhere:9000" in decision.reason
