"""Remote retention of the archive (issue 28 item 5) against the real S3 server (SeaweedFS):
``upload.keep_last`` after each save's upload, ``statecraft archive prune --keep-last N``
(a dry run unless ``--apply``), and the crash-safe order (the commit record goes first, so an
interrupted prune leaves an unpublished remainder that the next prune collects, never a
published torn iteration). Never the newest published iteration, never the one the local
``latest`` names, never a corrupt one, never an artifact."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from checkpoint_runs import open_checkpointer, train
from fetch_trees import archive, make_artifact, make_checkpoint
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.archive.catch_up import pending_uploads
from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.listing import list_archive
from statecraft.checkpoint.archive.remote_prune_bindings import RemotePruneContext, unpublish
from statecraft.checkpoint.archive.remote_retention import prune_remote
from statecraft.checkpoint.kernel.layout import MANIFEST_NAME
from statecraft.cli import main
from statecraft.errors import ConfigError
from statecraft.storage.local import LocalStore
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials


def _keys(server: S3Server, prefix: str) -> dict[str, str]:
    found: dict[str, str] = {}
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    for page in pages:
        found.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return found


def _states(bucket: S3Bucket, prefix: str) -> dict[str, str]:
    return {it.name: it.state for it in list_archive(bucket, prefix).iterations}


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["exit_code"] == code
    return code, envelope


@pytest.fixture
def bucket(s3_server: S3Server) -> S3Bucket:
    return S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)


@pytest.fixture
def archived(bucket: S3Bucket, tmp_path: Path) -> str:
    """Checkpoints iter_2/4/6/8 and an artifact of iteration 2 archived under a fresh prefix."""
    prefix = f"retention/{uuid.uuid4().hex[:10]}/checkpoints"
    run = tmp_path / "run"
    for n in (2, 4, 6, 8):
        directory = make_checkpoint(run, n)
        archive(bucket, directory, f"{prefix}/{directory.name}")
    artifact = make_artifact(run, 2)
    archive(bucket, artifact, f"{prefix}/checkpoint_artifacts/{artifact.name}")
    return prefix


class TestArchivePruneCommand:
    def test_dry_run_by_default_then_apply(
        self, capsys, s3_server: S3Server, bucket: S3Bucket, archived: str
    ) -> None:
        """Without --apply nothing is deleted and each row says why; --apply deletes the
        older published iterations and nothing else (the artifact of iteration 2 stays)."""
        prefix = archived
        creds = str(s3_server.credentials_file)
        uri = f"s3://{BUCKET}/{prefix}"
        before = _keys(s3_server, prefix)
        code, env = _run(
            capsys, "archive", "prune", uri, "--keep-last", "2", "--credentials", creds
        )
        assert code == 0
        data = env["data"]
        assert data["dry_run"] is True
        rows = {r["iteration"]: (r["action"], r["reason"]) for r in data["rows"]}
        assert rows == {
            8: ("keep", "newest published"),
            6: ("keep", "latest 2"),
            4: ("delete", "not among the latest 2"),
            2: ("delete", "not among the latest 2"),
        }
        assert data["deleted"] == []
        assert _keys(s3_server, prefix) == before
        code = main(
            ["archive", "prune", uri, "--keep-last", "2", "--dry-run", "--credentials", creds]
        )
        assert code == 0
        assert "pass --apply to delete" in capsys.readouterr().out
        assert _keys(s3_server, prefix) == before

        code, env = _run(
            capsys, "archive", "prune", uri, "--keep-last", "2", "--apply", "--credentials", creds
        )
        assert code == 0
        assert env["data"]["deleted"] == [2, 4]
        assert env["data"]["freed_bytes"] > 0
        after = _keys(s3_server, prefix)
        assert not any("/iter_000000002/" in k and "checkpoint_artifacts" not in k for k in after)
        assert not any(k.startswith(f"{prefix}/iter_000000004/") for k in after)
        kept = {k: e for k, e in before.items() if "/iter_00000000[68]/" in k or "artifacts" in k}
        assert {k: after[k] for k in kept} == kept  # untouched, byte for byte (etags)
        assert _states(bucket, prefix) == {
            "iter_000000006": "complete",
            "iter_000000008": "complete",
            "checkpoint_artifacts/iter_000000002": "complete",
        }

    def test_bad_input(self, capsys, s3_server: S3Server, archived: str) -> None:
        """--keep-last 0 and a URI that is not s3:// are refused by name; nothing deleted."""
        creds = str(s3_server.credentials_file)
        before = _keys(s3_server, archived)
        code, env = _run(
            capsys, "archive", "prune", f"s3://{BUCKET}/{archived}", "--keep-last", "0",
            "--apply", "--credentials", creds,
        )  # fmt: skip
        assert code == 1
        assert "keep_last" in env["errors"][0]["message"]
        assert ">= 1" in env["errors"][0]["message"]
        code, env = _run(capsys, "archive", "prune", "bucket/x", "--keep-last", "1")
        assert code == 1
        assert "s3://" in env["errors"][0]["message"]
        with pytest.raises(SystemExit):
            main(["archive", "prune", f"s3://{BUCKET}/{archived}", "--dry-run", "--apply",
                  "--keep-last", "1"])  # fmt: skip
        assert _keys(s3_server, archived) == before

    def test_corrupt_is_kept_and_newer_partial_is_kept(
        self, s3_server: S3Server, bucket: S3Bucket, archived: str, tmp_path: Path
    ) -> None:
        """A corrupt iteration (a file its manifest names is gone) is never deleted; a partial
        one newer than a kept one may be an upload in progress: kept."""
        prefix = archived
        client = s3_server.client()
        client.delete_object(Bucket=BUCKET, Key=f"{prefix}/iter_000000004/model.pt")
        extra = make_checkpoint(tmp_path / "later", 10)
        archive(bucket, extra, f"{prefix}/{extra.name}")
        client.delete_object(Bucket=BUCKET, Key=f"{prefix}/iter_000000010/{MANIFEST_NAME}")
        report = prune_remote(bucket, prefix, 1, verify=True)
        rows = {r.iteration: (r.state, r.action) for r in report.rows}
        assert rows == {
            10: ("partial", "keep"),
            8: ("complete", "keep"),
            6: ("complete", "delete"),
            4: ("corrupt", "keep"),
            2: ("complete", "delete"),
        }
        assert report.deleted == (2, 6)
        states = _states(bucket, prefix)
        assert states["iter_000000004"] == "corrupt"
        assert states["iter_000000010"] == "partial"
        assert "iter_000000006" not in states


class TestCrashSafeOrder:
    def test_interrupted_prune_leaves_an_unpublished_remainder_that_the_next_collects(
        self, s3_server: S3Server, bucket: S3Bucket, archived: str
    ) -> None:
        """A prune stopped right after its first step (the commit record deleted) leaves
        iter_2 partial, never complete-and-torn; the next prune collects it."""
        prefix = archived
        ctx = RemotePruneContext(bucket, f"{prefix}/iter_000000002")
        unpublish(ctx)  # the process dies here
        states = _states(bucket, prefix)
        assert states["iter_000000002"] == "partial"
        assert _keys(s3_server, f"{prefix}/iter_000000002/")  # objects remain, unpublished
        report = prune_remote(bucket, prefix, 3)
        assert report.deleted == (2,)
        assert [r.reason for r in report.rows if r.iteration == 2] == [
            "unpublished remainder older than every kept iteration"
        ]
        assert _keys(s3_server, f"{prefix}/iter_000000002/") == {}
        assert _keys(s3_server, f"{prefix}/checkpoint_artifacts/")  # the artifact stays


class TestUploadKeepLast:
    def test_training_run_keeps_the_newest_two_archived(
        self, s3_server: S3Server, bucket: S3Bucket, tmp_path: Path
    ) -> None:
        """upload.keep_last=2: after each save's upload the archive holds the newest two
        published iterations; the local receipts stay (so nothing is uploaded again)."""
        prefix = f"keep-last/{uuid.uuid4().hex[:10]}/checkpoints"
        knobs = [
            "upload.enabled=true",
            f"upload.bucket={BUCKET}",
            f"upload.credentials={s3_server.credentials_file}",
            f"upload.prefix={prefix}",
            "upload.keep_last=2",
        ]
        ckpt, objects = open_checkpointer(tmp_path, *knobs)
        ckpt.resume()
        train(ckpt, objects, 8)
        ckpt.finalize()
        ckpt.close()
        assert _states(bucket, prefix) == {
            "iter_000000006": "complete",
            "iter_000000008": "complete",
        }
        (root,) = (tmp_path / "proj" / "group" / "name").glob("*/checkpoints")
        local = LocalStore(str(root))
        destination = ArchiveDestination(bucket, prefix)
        assert pending_uploads(local, destination) == []

    def test_the_local_latest_is_protected(
        self, s3_server: S3Server, bucket: S3Bucket, tmp_path: Path
    ) -> None:
        """The iteration the local latest names is kept remotely whatever keep_last says."""
        from statecraft.checkpoint.archive.catch_up import archive_saved

        run = tmp_path / "run"
        for n in (2, 4, 6):
            make_checkpoint(run, n)
        store = LocalStore(str(run / "checkpoints"))
        store.write_atomic("latest_checkpoint.txt", b"iter_000000002\n")
        prefix = f"keep-latest/{uuid.uuid4().hex[:10]}/checkpoints"
        destination = ArchiveDestination(bucket, prefix, keep_last=1)
        outcomes = [archive_saved(store, n, destination, catch_up=0) for n in (2, 4, 6)]
        assert [o.pruned for o in outcomes] == [(), (), (4,)]
        assert all(o.prune_error is None for o in outcomes)
        assert _states(bucket, prefix) == {
            "iter_000000002": "complete",
            "iter_000000006": "complete",
        }

    def test_knob_refuses_bad_values(self) -> None:
        """upload.keep_last and checkpoint_store.keep_last take a count >= 0, by name."""
        import statecraft as sc

        for knob in ("upload.keep_last=-1", "checkpoint_store.keep_last=two"):
            with pytest.raises(ConfigError) as exc:
                sc.CheckpointConfig.load(None, [knob])
            assert knob.split("=")[0] in str(exc.value)
