"""Archive upload against a real SeaweedFS (the session ``s3_server``), through real torch
training runs (tests/checkpoint_runs.py) and the fault proxy (tests/s3_proxy.py): the bucket
mirrors the iteration directories, receipts are valid, retention prunes only what is
archived, a failing upload is best effort, a durable validation's publication is strict."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from pathlib import Path

import pytest
from checkpoint_runs import RUN, open_checkpointer, train
from s3_proxy import Fault, FaultProxy
from s3_server import BUCKET, S3Server

import statecraft as sc
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.marker import LegacyMarker, UploadedMarker, read_marker
from statecraft.checkpoint.archive.open import open_bucket
from statecraft.checkpoint.archive.upload_bindings import upload_checkpoint
from statecraft.errors import ObjectRequestError
from statecraft.storage.local import LocalStore
from statecraft.storage.s3_retry import RetryPolicy

FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)
#: a run that meets the proxy's outage: each failing request gives up after 2 s (the default
#: upload.retry_wait_s, 90 s, would ride the outage out for minutes)
OUTAGE = "upload.retry_wait_s=2"


@pytest.fixture(scope="module")
def proxied_credentials(
    proxy: FaultProxy, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return s3_server.write_credentials(
        tmp_path_factory.mktemp("upload") / "proxied.json", endpoint_url=proxy.endpoint_url
    )


def _prefix() -> str:
    return f"upload-tests/{uuid.uuid4().hex[:10]}/checkpoints"


def _knobs(credentials: Path, prefix: str, *extra: str) -> list[str]:
    return [
        "upload.enabled=true",
        f"upload.bucket={BUCKET}",
        f"upload.credentials={credentials}",
        f"upload.prefix={prefix}",
        *extra,
    ]


def _checkpoints(out: Path) -> Path:
    attempt = next(p for p in RUN.job_dir(out).iterdir() if p.is_dir())
    return attempt / "checkpoints"


def _remote(server: S3Server, prefix: str) -> dict[str, bytes]:
    client = server.client()
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return {
        k[len(prefix) + 1 :]: client.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in keys
    }


def _local(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and p.name != ".uploaded"
    }


def _receipt(directory: Path) -> UploadedMarker:
    marker = read_marker(LocalStore(str(directory.parent)), directory.name)
    assert isinstance(marker, UploadedMarker)
    return marker


class TestTrainingWithUpload:
    def test_bucket_mirrors_iterations_and_retention_prunes_only_uploaded(
        self, tmp_path: Path, s3_server: S3Server
    ) -> None:
        """An asynchronous run with upload and keep_model_last=1: every saved iteration is
        mirrored byte for byte under <prefix>/iter_N/, each kept one holds a valid receipt
        (destination, every file), and only uploaded iterations were pruned."""
        prefix = _prefix()
        knobs = _knobs(s3_server.credentials_file, prefix, "save_async=true", "keep_model_last=1")
        ckpt, objects = open_checkpointer(tmp_path, *knobs)
        ckpt.resume()
        train(ckpt, objects, 6)
        ckpt.finalize()
        ckpt.close()
        root = _checkpoints(tmp_path)
        assert sorted(p.name for p in root.glob("iter_*")) == ["iter_000000006"]
        for n in (2, 4, 6):
            remote = _remote(s3_server, f"{prefix}/iter_{n:09d}")
            assert ".posttrain-manifest.json" in remote
            assert ".uploaded" not in remote
            assert {"model.pt", "optim.pt", "trainer.pt", "data.pt"} <= set(remote)
        newest = root / "iter_000000006"
        assert _remote(s3_server, f"{prefix}/iter_000000006") == _local(newest)
        marker = _receipt(newest)
        assert marker.destination.uri() == f"s3://{BUCKET}/{prefix}/iter_000000006"
        assert {e.path for e in marker.files} == set(_local(newest))
        by = {e.path: e for e in marker.files}
        manifest = by[".posttrain-manifest.json"]
        expected = hashlib.sha256((newest / ".posttrain-manifest.json").read_bytes()).hexdigest()
        assert manifest.sha256 == expected
        text = (newest / ".uploaded").read_text()
        assert s3_server.secret_key not in text
        assert s3_server.access_key not in text
        assert all(s.upload is not None for s in ckpt.saves if hasattr(s, "upload"))

    def test_failing_upload_is_best_effort_and_its_dir_is_kept(
        self,
        tmp_path: Path,
        s3_server: S3Server,
        clean_proxy: FaultProxy,
        proxied_credentials: Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """While every PUT answers InternalError, the save's upload fails: training goes on,
        one WARNING names the destination and the error, no receipt is written and retention
        never prunes it while it has none; a later save uploads its own, then catches the
        failed one up (issue 28 item 4), after which retention may release it."""
        prefix = _prefix()
        knobs = _knobs(proxied_credentials, prefix, "keep_model_last=1", OUTAGE)
        ckpt, objects = open_checkpointer(tmp_path, *knobs)
        ckpt.resume()
        clean_proxy.inject(Fault.INTERNAL_ERROR, method="PUT", times=10_000)
        with caplog.at_level(logging.WARNING, logger="statecraft.upload"):
            train(ckpt, objects, 2)
            ckpt.wait()
        root = _checkpoints(tmp_path)
        warned = [r.getMessage() for r in caplog.records if "upload of" in r.getMessage()]
        assert warned
        assert f"s3://{BUCKET}/{prefix}/iter_000000002" in warned[0]
        assert "InternalError" in warned[0] or "500" in warned[0]
        assert "upload.retry_wait_s, now 2 s" in warned[0]  # the budget, and its knob
        assert not (root / "iter_000000002" / ".uploaded").exists()
        assert (root / "iter_000000002" / "optim.pt").exists()  # never pruned
        clean_proxy.clear()
        train(ckpt, objects, 2)
        ckpt.finalize()
        ckpt.close()
        assert _receipt(root / "iter_000000004").iteration == 4
        assert ckpt.saves[0].upload is None
        assert ckpt.saves[0].upload_error is not None
        caught_up = _remote(s3_server, f"{prefix}/iter_000000002")
        assert {".posttrain-manifest.json", "model.pt", "optim.pt", "trainer.pt"} <= set(caught_up)
        assert not (root / "iter_000000002").exists()  # archived, then released by retention


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoints root holding committed iter_2 (with data.pt), no receipt."""
    out = tmp_path_factory.mktemp("committed")
    ckpt, objects = open_checkpointer(out)
    ckpt.resume()
    train(ckpt, objects, 2)
    ckpt.finalize()
    ckpt.close()
    return _checkpoints(out)


class TestUploadFaults:
    @pytest.mark.parametrize(
        "fault", [Fault.SLOWDOWN, Fault.INTERNAL_ERROR, Fault.DROP_MID_BODY, Fault.LOST_RESPONSE]
    )
    def test_fault_on_a_put_still_completes(
        self,
        fault: Fault,
        committed: Path,
        s3_server: S3Server,
        clean_proxy: FaultProxy,
        proxied_credentials: Path,
    ) -> None:
        """A fault on one PUT of the upload is retried (or resolved by looking): the upload
        completes and the remote bytes are the local ones."""
        store = LocalStore(str(committed))
        prefix = _prefix()
        bucket = open_bucket(str(proxied_credentials), BUCKET, retry=FAST_RETRY)
        clean_proxy.inject(fault, method="PUT", path_contains="trainer.pt")
        report = upload_checkpoint(store, 2, ArchiveDestination(bucket, prefix))
        assert any(o != "200" for _, _, o in clean_proxy.requests)
        remote = _remote(s3_server, f"{prefix}/iter_000000002")
        assert remote == _local(committed / "iter_000000002")
        assert report.marker.destination.prefix == f"{prefix}/iter_000000002"
        (committed / "iter_000000002" / ".uploaded").unlink()  # the next case starts clean

    def test_server_killed_mid_upload_then_the_next_upload_completes(
        self,
        committed: Path,
        s3_server: S3Server,
        clean_proxy: FaultProxy,
        proxied_credentials: Path,
    ) -> None:
        """The server is SIGKILLed while the upload runs: it fails with no receipt; after a
        restart the next upload completes, skipping what had arrived."""
        store = LocalStore(str(committed))
        prefix = _prefix()
        bucket = open_bucket(str(proxied_credentials), BUCKET, retry=FAST_RETRY)
        clean_proxy.inject(Fault.HOOK, method="PUT", path_contains="optim.pt", hook=s3_server.kill)
        try:
            with pytest.raises(ObjectRequestError):
                upload_checkpoint(store, 2, ArchiveDestination(bucket, prefix))
            assert not (committed / "iter_000000002" / ".uploaded").exists()
        finally:
            s3_server.start()
        clean_proxy.clear()
        report = upload_checkpoint(store, 2, ArchiveDestination(bucket, prefix))
        assert report.skipped >= 1  # data.pt / model.pt arrived before the kill
        assert _remote(s3_server, f"{prefix}/iter_000000002") == _local(
            committed / "iter_000000002"
        )
        (committed / "iter_000000002" / ".uploaded").unlink()


class TestValidationPublication:
    def test_publication_is_strict_and_resume_publishes_without_evaluating(
        self,
        tmp_path: Path,
        s3_server: S3Server,
        clean_proxy: FaultProxy,
        proxied_credentials: Path,
    ) -> None:
        """With upload on and the endpoint refusing every PUT, a durable validation's
        publication fails: iter_N stays publication-pending (its evaluated record is there,
        no published one). The resumed run publishes it (uploaded, receipt written) without
        evaluating again."""
        calls: list[int] = []

        def evaluate(step: int) -> dict[str, float]:
            calls.append(step)
            return {"loss": 0.5}

        prefix = _prefix()
        knobs = _knobs(
            proxied_credentials,
            prefix,
            "save_every=0",
            "validation.every=2",
            "validation.save_checkpoint=true",
            OUTAGE,
        )
        ckpt, objects = open_checkpointer(tmp_path, *knobs)
        ckpt.validate_with(evaluate, source="heldout")
        ckpt.resume()
        clean_proxy.inject(Fault.INTERNAL_ERROR, method="PUT", times=10_000)
        with pytest.raises(ObjectRequestError, match=r"upload\.retry_wait_s, now 2 s"):
            train(ckpt, objects, 2)
        ckpt.close()
        clean_proxy.clear()
        it = _checkpoints(tmp_path) / "iter_000000002"
        assert (it / ".validation-publication-evaluated.json").exists()
        assert not (it / ".validation-publication-published.json").exists()
        assert not (it / ".uploaded").exists()
        assert calls == [2]
        again, _ = open_checkpointer(tmp_path, *knobs)
        again.validate_with(evaluate, source="heldout")
        result = again.resume()
        again.close()
        assert calls == [2]
        assert result.step == 2
        assert (it / ".validation-publication-published.json").exists()
        assert _receipt(it).iteration == 2
        remote = _remote(s3_server, f"{prefix}/iter_000000002")
        assert json.loads(remote[".posttrain-manifest.json"])["iteration"] == 2


class TestLegacyMarker:
    def test_legacy_one_line_marker_still_gates_retention(self, tmp_path: Path) -> None:
        """A one-line .uploaded of an earlier release reads as a legacy marker (binds nothing)
        and still lets retention with require_uploaded prune its iteration; the iteration
        without any marker is kept."""
        from statecraft.checkpoint.retention.policies import LatestN
        from statecraft.checkpoint.retention.run import RetentionPlan, run_retention

        ckpt, objects = open_checkpointer(tmp_path)
        ckpt.resume()
        train(ckpt, objects, 6)
        ckpt.finalize()
        ckpt.close()
        root = _checkpoints(tmp_path)
        (root / "iter_000000002" / ".uploaded").write_text("uploaded\n")
        store = LocalStore(str(root))
        assert isinstance(read_marker(store, "iter_000000002"), LegacyMarker)
        plan = RetentionPlan(model=LatestN(1), require_uploaded=True)
        run_retention(store, plan, saved_iteration=6, lease=None)
        assert not (root / "iter_000000002").exists()
        assert (root / "iter_000000004" / "model.pt").exists()


class TestArtifactPublication:
    def test_committed_artifacts_are_published(self, tmp_path: Path, s3_server: S3Server) -> None:
        """checkpoint_components=[model] with upload: each committed artifact is published
        under the sibling checkpoint_artifacts/iter_N/ (declaration, payload, manifest) and
        gets an artifact receipt."""
        prefix = _prefix()
        knobs = _knobs(s3_server.credentials_file, prefix, "checkpoint_components=[model]")
        with pytest.warns(UserWarning, match="checkpoint_components"):
            ckpt, objects = open_checkpointer(tmp_path, *knobs)
        ckpt.resume()
        train(ckpt, objects, 2)
        ckpt.finalize()
        ckpt.close()
        artifact = _checkpoints(tmp_path).parent / "checkpoint_artifacts" / "iter_000000002"
        marker = _receipt(artifact)
        assert marker.kind == "artifact"
        remote_prefix = prefix.rsplit("/", 1)[0] + "/checkpoint_artifacts/iter_000000002"
        assert marker.destination.prefix == remote_prefix
        remote = _remote(s3_server, remote_prefix)
        assert remote["model.pt"] == (artifact / "model.pt").read_bytes()
        assert ".posttrain-checkpoint-artifact.json" in remote
        assert ".posttrain-archive.json" in remote


class TestEmergencyUpload:
    def test_emergency_checkpoint_is_archived_after_done(
        self, tmp_path: Path, s3_server: S3Server
    ) -> None:
        """A sentinel stop's emergency checkpoint is archived once DONE.json is written: its
        receipt is there and the bucket mirrors it."""
        prefix, sentinels = _prefix(), tmp_path / "logs"
        sentinels.mkdir()
        knobs = _knobs(
            s3_server.credentials_file,
            prefix,
            "save_every=0",
            f"termination.sentinel_dir={sentinels}",
        )
        ckpt, objects = open_checkpointer(tmp_path / "out", *knobs)
        ckpt.resume()
        train(ckpt, objects, 2)
        (sentinels / "SIGUSR1_RECEIVED").touch()
        objects.step()
        ckpt.record(sc.Outcome.APPLIED)
        end = ckpt.step_end()
        ckpt.close()
        assert end.stop
        assert end.saved is not None
        assert end.saved.upload is not None
        it = _checkpoints(tmp_path / "out") / "iter_000000003"
        assert _receipt(it).iteration == 3
        assert _remote(s3_server, f"{prefix}/iter_000000003") == _local(it)
