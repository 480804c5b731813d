"""``statecraft inspect`` on DCP checkpoints (per-component shard counts, sizes, world size at
save; the ``.metadata`` read by a restricted unpickler) and on ``s3://`` direct roots against
the real S3 server (read-only: every key and etag is the same before and after), plus
``statecraft lease show / takeover``."""

from __future__ import annotations

import json
import os
import pickle
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.direct.manifest import DirectManifest, generation_dir, manifest_path
from statecraft.checkpoint.fencing.object_lease import (
    OBJECT_LEASE_NAME,
    acquire_object_lease,
    read_object_lease,
)
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, format_latest
from statecraft.cli import main
from statecraft.cli.inspect.dcp import dcp_component_report, load_metadata
from statecraft.cli.inspect.remote import ReadOnlyBucket, inspect_remote
from statecraft.errors import StoreError, WriterLeaseError
from statecraft.storage.base import FileRecord
from statecraft.storage.digest import Digest
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ObjectStore, SimBucket
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials


def _dcp_dir(path: Path, seed: int) -> Path:
    """A real DCP checkpoint directory (one process: rank 0's shards + .metadata)."""
    generator = torch.Generator().manual_seed(seed)
    state = {
        "w": torch.randn(64, 32, generator=generator),
        "b": torch.zeros(32, dtype=torch.float16),
        "nested": {"x": torch.ones(8)},
        "step": 3,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(path)), no_dist=True)
    return path


class TestLocalDcp:
    def test_metadata_read(self, tmp_path: Path) -> None:
        _dcp_dir(tmp_path / "iter_000000002" / "model", 1)
        report = dcp_component_report(LocalStore(str(tmp_path)), "iter_000000002/model")
        assert report is not None
        assert report["shards"] == 1
        assert report["files"][0]["name"] == "__0_0.distcp"
        assert (
            report["shard_bytes"] == (tmp_path / "iter_000000002/model/__0_0.distcp").stat().st_size
        )
        assert report["world_size_at_save"] == 1
        meta = report["metadata"]
        assert meta["loaded"] is True
        assert meta["entries"] == 4
        assert meta["tensors"] == 3
        assert meta["tensor_bytes"] == 64 * 32 * 4 + 32 * 2 + 8 * 4
        assert meta["missing_files"] == []

    def test_ranks_counted_from_file_names_when_metadata_is_unreadable(
        self, tmp_path: Path
    ) -> None:
        model = _dcp_dir(tmp_path / "it" / "model", 1)
        for rank in (1, 2, 3):
            (model / f"__{rank}_0.distcp").write_bytes(b"x" * 10)
        (model / ".metadata").write_bytes(b"not a pickle")
        report = dcp_component_report(LocalStore(str(tmp_path)), "it/model")
        assert report is not None
        assert report["shards"] == 4
        assert report["world_size_at_save"] == 4
        assert report["ranks"] == [0, 1, 2, 3]
        assert report["metadata"]["loaded"] is False
        assert "does not load" in report["metadata"]["problem"]

    def test_missing_shard_named_by_metadata(self, tmp_path: Path) -> None:
        model = _dcp_dir(tmp_path / "it" / "model", 1)
        (model / "__0_0.distcp").unlink()
        report = dcp_component_report(LocalStore(str(tmp_path)), "it/model")
        assert report is not None
        assert report["metadata"]["missing_files"] == ["__0_0.distcp"]

    def test_restricted_unpickler_refuses_other_globals(self, tmp_path: Path) -> None:
        marker = tmp_path / "ran"

        class Evil:
            def __reduce__(self) -> Any:
                return (os.mkdir, (str(marker),))

        with pytest.raises(ValueError, match="not allowed"):
            load_metadata(pickle.dumps(Evil()))
        assert not marker.exists()
        with pytest.raises(ValueError, match="not DCP Metadata"):
            load_metadata(pickle.dumps({"a": 1}))

    def test_inspect_path_lists_dcp_components(self, tmp_path: Path) -> None:
        checkpoints = tmp_path / "checkpoints"
        _dcp_dir(checkpoints / "iter_000000002" / "model", 1)
        _dcp_dir(checkpoints / "iter_000000002" / "optim", 2)
        from statecraft.cli.inspect import inspect_path, render_text

        data = inspect_path(checkpoints)
        (it,) = data["attempts"][0]["checkpoints"]["iterations"]
        assert sorted(it["dcp"]) == ["model", "optim"]
        assert it["dcp"]["optim"]["world_size_at_save"] == 1
        text = render_text(data)
        assert "model/ (DCP): 1 shards" in text


class TestReadOnlyBucket:
    def test_writes_refused(self) -> None:
        bucket = ReadOnlyBucket(SimBucket())
        with pytest.raises(StoreError, match="read-only"):
            bucket.put("k", b"x")
        with pytest.raises(StoreError, match="read-only"):
            bucket.delete("k")


# ------------------------------------------------------------------------- s3:// roots


def _put_tree(bucket: S3Bucket, prefix: str, local: Path, under: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        bucket.put(f"{prefix}/{under}/{path.relative_to(local).as_posix()}", path.read_bytes())


def _seed_root(bucket: S3Bucket, prefix: str, tmp_path: Path) -> dict[str, Any]:
    """iter_4 committed, iter_5 with a manifest naming a missing generation, iter_6 partial;
    latest names iter_4; a live lease."""
    store = ObjectStore(bucket, prefix=prefix, name=BUCKET)
    lease = acquire_object_lease(store, ttl_s=600, takeover=False, host="node-x", pid=4242)
    for iteration in (4, 5, 6):
        it = f"iter_{iteration:09d}"
        _put_tree(bucket, prefix, _dcp_dir(tmp_path / it / "model", iteration), f"{it}/model")
        if iteration == 6:
            continue
        _put_tree(bucket, prefix, _dcp_dir(tmp_path / it / "optim", iteration), f"{it}/optim")
        trainer = b"trainer-state-%d" % iteration
        gen = f"g{iteration}"
        if iteration == 4:
            store.write_atomic(f"{generation_dir(iteration, gen)}/trainer.pt", trainer)
        manifest = DirectManifest.build(
            iteration,
            control_generation=gen,
            control={"trainer.pt": FileRecord("trainer.pt", len(trainer), Digest.of(trainer))},
            plan=("model", "optimizer", "training_state"),
            writer={"host": "node-x", "world_size": "2"},
            lease_generation=lease.generation,
        )
        store.put_if(manifest_path(iteration), manifest.encode(), if_match=None, if_none_match=True)
    store.write_atomic(LATEST_POINTER, format_latest(4))
    return {"lease": lease}


def _snapshot(server: S3Server, prefix: str) -> list[tuple[str, str, int]]:
    client = server.client()
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out.extend((o["Key"], o["ETag"], o["Size"]) for o in page.get("Contents", []))
    return sorted(out)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(list(argv))
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def seeded(s3_server: S3Server, tmp_path: Path) -> dict[str, Any]:
    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    prefix = f"inspect-{uuid.uuid4().hex[:8]}/checkpoints"
    info = _seed_root(bucket, prefix, tmp_path)
    return {**info, "bucket": bucket, "prefix": prefix, "uri": f"s3://{BUCKET}/{prefix}"}


class TestInspectS3:
    def test_root_read_only(
        self, seeded: dict[str, Any], s3_server: S3Server, capsys: pytest.CaptureFixture[str]
    ) -> None:
        before = _snapshot(s3_server, seeded["prefix"])
        creds = str(s3_server.credentials_file)
        code, envelope = _cli(capsys, "inspect", seeded["uri"], "--credentials", creds, "--json")
        assert code == 0, envelope
        data = envelope["data"]
        states = {it["name"]: it["state"] for it in data["iterations"]}
        assert states == {
            "iter_000000006": "partial",
            "iter_000000005": "corrupt",
            "iter_000000004": "committed",
        }
        by_name = {it["name"]: it for it in data["iterations"]}
        assert "control file" in by_name["iter_000000005"]["reason"]
        assert "missing" in by_name["iter_000000005"]["reason"]
        committed = by_name["iter_000000004"]
        assert committed["manifest"]["control_generation"] == "g4"
        assert committed["dcp"]["model"]["shards"] == 1
        assert committed["dcp"]["model"]["world_size_at_save"] == 1
        assert committed["dcp"]["optim"]["metadata"]["loaded"] is True
        assert committed["world_size_at_save"] == 2  # the manifest's record wins
        assert by_name["iter_000000006"]["world_size_at_save"] == 1  # from the shards
        assert data["latest"]["status"] == "ok"
        assert data["latest"]["names"] == "iter_000000004"
        assert data["newest_committed"] == "iter_000000004"
        assert data["lease"]["status"] == "live"
        assert data["lease"]["host"] == "node-x"
        assert data["lease"]["pid"] == 4242
        # text too
        assert main(["inspect", seeded["uri"], "--credentials", creds]) == 0
        text = capsys.readouterr().out
        assert "lease: live" in text
        assert "PID 4242" in text
        assert "model/ (DCP): 1 shards" in text
        assert _snapshot(s3_server, seeded["prefix"]) == before

    def test_one_iteration(
        self, seeded: dict[str, Any], s3_server: S3Server, capsys: pytest.CaptureFixture[str]
    ) -> None:
        creds = str(s3_server.credentials_file)
        uri = f"{seeded['uri']}/iter_000000005"
        code, envelope = _cli(capsys, "inspect", uri, "--credentials", creds, "--json")
        assert code == 0
        assert envelope["data"]["explicit_resume"]["accepted"] is False
        assert "would fail" in envelope["data"]["explicit_resume"]["reason"]

    def test_empty_prefix_and_wrong_credentials(
        self, s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        creds = str(s3_server.credentials_file)
        uri = f"s3://{BUCKET}/nothing-{uuid.uuid4().hex[:8]}/checkpoints"
        code, envelope = _cli(capsys, "inspect", uri, "--credentials", creds, "--json")
        assert code == 1
        assert "no objects there" in envelope["errors"][0]["message"]
        bad = s3_server.write_credentials(tmp_path / "bad.json", secret="wrong-secret-123456")
        code, envelope = _cli(capsys, "inspect", uri, "--credentials", str(bad), "--json")
        assert code == 1
        assert envelope["errors"][0]["code"] == "object_request"

    def test_truncated_metadata_is_corrupt(self, tmp_path: Path) -> None:
        sim = SimBucket()
        store = ObjectStore(sim, prefix="r", name="sim-bucket")
        model = _dcp_dir(tmp_path / "model", 1)
        for path in model.iterdir():
            data = path.read_bytes()
            if path.name == ".metadata":
                data = data[: len(data) // 2]
            store.write_atomic(f"iter_000000002/model/{path.name}", data)
        trainer = b"t"
        store.write_atomic(f"{generation_dir(2, 'g1')}/trainer.pt", trainer)
        manifest = DirectManifest.build(
            2,
            control_generation="g1",
            control={"trainer.pt": FileRecord("trainer.pt", 1, Digest.of(trainer))},
            plan=("model",),
            writer={},
            lease_generation=1,
            components={"model": "model"},
        )
        store.create_exclusive(manifest_path(2), manifest.encode())
        (it,) = inspect_remote("s3://sim-bucket/r", sim)["iterations"]
        assert it["state"] == "corrupt"
        assert "DCP component model: .metadata does not load" in it["reason"]

    def test_inspect_via_sim(self, tmp_path: Path) -> None:
        sim = SimBucket()
        store = ObjectStore(sim, prefix="r", name="sim-bucket")
        store.write_atomic("iter_000000001/model/__0_0.distcp", b"x")
        data = inspect_remote("s3://sim-bucket/r", sim)
        assert data["iterations"][0]["state"] == "partial"
        assert data["lease"] is None
        assert data["latest"]["status"] == "missing"


class TestLeaseCli:
    def test_show_and_takeover(
        self, seeded: dict[str, Any], s3_server: S3Server, capsys: pytest.CaptureFixture[str]
    ) -> None:
        creds = str(s3_server.credentials_file)
        uri = seeded["uri"]
        old = seeded["lease"]
        code, envelope = _cli(capsys, "lease", "show", uri, "--credentials", creds, "--json")
        assert code == 0
        assert envelope["data"]["lease"]["owner"] == old.owner
        assert envelope["data"]["lease"]["status"] == "live"
        code, envelope = _cli(
            capsys, "lease", "takeover", uri, "--credentials", creds, "--expect-owner", "nobody",
            "--json",
        )  # fmt: skip
        assert code == 1
        assert "not by nobody" in envelope["errors"][0]["message"]
        old.check()  # untouched
        code, envelope = _cli(
            capsys, "lease", "takeover", uri, "--credentials", creds, "--expect-owner", old.owner,
            "--json",
        )  # fmt: skip
        assert code == 0, envelope
        assert envelope["data"]["taken"] is True
        assert envelope["data"]["generation"] == old.generation + 1
        with pytest.raises(WriterLeaseError, match="taken over"):
            old.check()
        store = ObjectStore(seeded["bucket"], prefix=seeded["prefix"], name=BUCKET)
        found = read_object_lease(store)
        assert found is not None
        assert found[0].released is True
        nxt = acquire_object_lease(store, ttl_s=600, takeover=False)
        assert nxt.generation == old.generation + 2
        assert store.stat_etag(OBJECT_LEASE_NAME) == nxt.etag

    def test_iteration_uri_refused(
        self, s3_server: S3Server, capsys: pytest.CaptureFixture[str]
    ) -> None:
        creds = str(s3_server.credentials_file)
        uri = f"s3://{BUCKET}/x/checkpoints/iter_000000001"
        code, envelope = _cli(capsys, "lease", "show", uri, "--credentials", creds, "--json")
        assert code == 1
        assert "names one iteration" in envelope["errors"][0]["message"]
