"""Catch-up uploads after an archive outage (issue 28 item 4), against the real S3 server
(SeaweedFS) behind the fault proxy: a save whose own upload succeeds also archives, oldest
first and at most ``catch_up_per_save``, the committed iterations an outage left without a
receipt; one summarised WARNING per failed upload (the bucket client's per-retry lines are
demoted to DEBUG); a WARNING when iterations without a receipt hold more than the configured
share of the disk; the knobs refuse bad values."""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

import pytest
from checkpoint_runs import open_checkpointer, train
from s3_proxy import Fault, FaultProxy
from s3_server import BUCKET, S3Server

import statecraft as sc
from statecraft.checkpoint.archive.catch_up import archive_saved, pending_uploads
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.open import open_bucket
from statecraft.errors import ConfigError
from statecraft.storage.local import LocalStore
from statecraft.storage.s3_retry import RetryPolicy

FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)
#: a run that meets the proxy's outage: each failing request gives up after 2 s (the default
#: upload.retry_wait_s, 90 s, would ride the outage out for minutes)
OUTAGE = "upload.retry_wait_s=2"


@pytest.fixture(scope="module")
def committed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoints root with committed iterations 2, 4, 6 and 8 and no receipt."""
    out = tmp_path_factory.mktemp("catchup-src")
    ckpt, objects = open_checkpointer(out)
    ckpt.resume()
    train(ckpt, objects, 8)
    ckpt.finalize()
    ckpt.close()
    (root,) = (out / "proj" / "group" / "name").glob("*/checkpoints")
    return root


@pytest.fixture
def root(committed_root: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "checkpoints"
    shutil.copytree(committed_root, copy)
    return copy


@pytest.fixture
def destination(clean_proxy: FaultProxy, s3_server: S3Server, tmp_path: Path) -> ArchiveDestination:
    credentials = s3_server.write_credentials(
        tmp_path / "proxied.json", endpoint_url=clean_proxy.endpoint_url
    )
    bucket = open_bucket(str(credentials), BUCKET, retry=FAST_RETRY)
    return ArchiveDestination(bucket, f"catchup/{uuid.uuid4().hex[:10]}/checkpoints")


def _receipts(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.glob("iter_*/.uploaded"))


def _remote_iterations(s3_server: S3Server, prefix: str) -> set[str]:
    client = s3_server.client()
    found: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        found.update(o["Key"][len(prefix) + 1 :].split("/")[0] for o in page.get("Contents", []))
    return found


def _warnings(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == name and r.levelno >= logging.WARNING
    ]


def test_outage_then_catch_up_oldest_first_bounded(
    root: Path,
    destination: ArchiveDestination,
    clean_proxy: FaultProxy,
    s3_server: S3Server,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = LocalStore(str(root))
    caplog.set_level(logging.DEBUG, logger="statecraft")
    clean_proxy.inject(Fault.INTERNAL_ERROR, method="PUT", times=10_000)
    for iteration in (2, 4, 6):
        failed = archive_saved(store, iteration, destination)
        assert failed.report is None
        assert failed.error is not None
    upload_warnings = _warnings(caplog, "statecraft.upload")
    assert len(upload_warnings) == 3, upload_warnings  # one per failed upload
    assert "iter_000000002" in upload_warnings[0]
    assert "retried request" in upload_warnings[0]
    assert _warnings(caplog, "statecraft.storage.s3") == []  # retries summarised
    retried = [r for r in caplog.records if r.name == "statecraft.storage.s3"]
    assert retried  # still there, at DEBUG
    assert _receipts(root) == []
    assert pending_uploads(store, destination) == [2, 4, 6, 8]

    clean_proxy.clear()
    done = archive_saved(store, 8, destination, catch_up=2)
    assert done.error is None
    assert done.report is not None
    assert done.report.iteration == 8
    assert done.caught_up == (2, 4)  # oldest first, bounded
    assert done.pending == (6,)
    assert done.pending_bytes > 0
    assert _receipts(root) == ["iter_000000002", "iter_000000004", "iter_000000008"]
    assert _remote_iterations(s3_server, destination.prefix) == {
        "iter_000000002",
        "iter_000000004",
        "iter_000000008",
    }
    again = archive_saved(store, 8, destination, catch_up=2)
    assert again.caught_up == (6,)
    assert again.pending == ()
    assert len(_receipts(root)) == 4


def test_catch_up_stops_at_its_first_failure(
    root: Path,
    destination: ArchiveDestination,
    clean_proxy: FaultProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The saved iteration uploads; the catch-up of iter_2 fails: one WARNING names it, the
    catch-up stops there (iter_4 is not tried), nothing local but receipts changes."""
    store = LocalStore(str(root))
    caplog.set_level(logging.WARNING, logger="statecraft")
    clean_proxy.inject(
        Fault.INTERNAL_ERROR, method="PUT", path_contains="iter_000000002", times=10_000
    )
    done = archive_saved(store, 8, destination, catch_up=3)
    assert done.report is not None
    assert done.caught_up == ()
    assert done.catch_up_error is not None
    warned = _warnings(caplog, "statecraft.upload")
    assert len(warned) == 1, warned
    assert "catch-up upload of iter_000000002" in warned[0]
    assert "retried request" in warned[0]
    assert _receipts(root) == ["iter_000000008"]
    assert all("iter_000000004" not in path for _, path, _ in clean_proxy.requests)


def test_zero_catch_up_uploads_only_the_save(root: Path, destination: ArchiveDestination) -> None:
    done = archive_saved(LocalStore(str(root)), 4, destination, catch_up=0)
    assert done.caught_up == ()
    assert done.pending == (2, 6, 8)
    assert _receipts(root) == ["iter_000000004"]


def test_disk_share_warning(
    root: Path, destination: ArchiveDestination, caplog: pytest.LogCaptureFixture
) -> None:
    """Iterations without a receipt holding more than the share of the disk: a WARNING
    naming them, the share and the knobs; none when under it."""
    store = LocalStore(str(root))
    caplog.set_level(logging.WARNING, logger="statecraft.upload")
    archive_saved(store, 8, destination, catch_up=0, pending_disk_share=1.0)
    assert _warnings(caplog, "statecraft.upload") == []
    archive_saved(store, 8, destination, catch_up=0, pending_disk_share=1e-12)
    (warned,) = _warnings(caplog, "statecraft.upload")
    assert "3 committed checkpoint(s) without an archive receipt" in warned
    assert "iter_000000002" in warned
    assert "upload.pending_disk_share" in warned
    assert "upload.catch_up_per_save" in warned


def test_training_run_catches_up_after_the_outage(
    tmp_path: Path,
    s3_server: S3Server,
    clean_proxy: FaultProxy,
) -> None:
    """Through the Checkpointer: saves 2 and 4 fail to upload, save 6 uploads itself and
    catches 2 and 4 up (upload.catch_up_per_save=2), so every iteration is archived."""
    credentials = s3_server.write_credentials(
        tmp_path / "proxied.json", endpoint_url=clean_proxy.endpoint_url
    )
    prefix = f"catchup/{uuid.uuid4().hex[:10]}/checkpoints"
    ckpt, objects = open_checkpointer(
        tmp_path / "out",
        "upload.enabled=true", f"upload.bucket={BUCKET}", f"upload.credentials={credentials}",
        f"upload.prefix={prefix}", "upload.catch_up_per_save=2",
        OUTAGE,
    )  # fmt: skip
    ckpt.resume()
    clean_proxy.inject(Fault.INTERNAL_ERROR, method="PUT", times=10_000)
    train(ckpt, objects, 4)
    ckpt.wait()
    assert _remote_iterations(s3_server, prefix) == set()
    clean_proxy.clear()
    train(ckpt, objects, 2)
    ckpt.finalize()
    ckpt.close()
    assert _remote_iterations(s3_server, prefix) == {
        "iter_000000002",
        "iter_000000004",
        "iter_000000006",
    }


@pytest.mark.parametrize(
    ("knob", "named"),
    [
        ("upload.catch_up_per_save=-1", "upload.catch_up_per_save"),
        ("upload.pending_disk_share=0", "upload.pending_disk_share"),
        ("upload.pending_disk_share=1.5", "upload.pending_disk_share"),
        ("upload.pending_disk_share=half", "upload.pending_disk_share"),
        ("upload.retry_wait_s=0", "upload.retry_wait_s"),
    ],
)
def test_bad_knobs_are_refused(knob: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        sc.CheckpointConfig.load(None, [knob])


def test_a_refused_iteration_uses_no_catch_up_slot(
    root: Path, destination: ArchiveDestination, caplog: pytest.LogCaptureFixture
) -> None:
    """An iteration the upload refuses (here iter_2, whose trainer.pt no longer matches its
    manifest) is skipped without a WARNING and does not use the save's catch-up slot; it is
    never uploaded and its local files are untouched."""
    store = LocalStore(str(root))
    trainer = root / "iter_000000002" / "trainer.pt"
    trainer.write_bytes(trainer.read_bytes() + b"\0")
    damaged = trainer.read_bytes()
    caplog.set_level(logging.WARNING, logger="statecraft.upload")
    done = archive_saved(store, 8, destination, catch_up=1)
    assert done.caught_up == (4,)
    assert done.catch_up_error is None
    assert _warnings(caplog, "statecraft.upload") == []
    assert _receipts(root) == ["iter_000000004", "iter_000000008"]
    assert trainer.read_bytes() == damaged
