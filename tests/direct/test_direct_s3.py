"""The direct object-store primary against the real S3 server (SeaweedFS, the ``s3_server``
fixture, real boto3): train + save + resume bit-exact from the bucket (one process; two gloo
ranks in tests/direct/test_direct_s3_multirank.py), an explicit ``s3://.../iter_N`` and a copied
tree, the retry after an ambiguous latest PUT, two writers on one root, a stale writer, and
bad input: every refusal names the culprit and nothing committed is lost."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from s3_server import BUCKET, S3Server
from test_direct_save_resume import (
    assert_same,
    make_tracked,
    resume,
    save,
    state_of,
    train,
)

from statecraft.checkpoint.config.schema import CheckpointStoreConfig
from statecraft.checkpoint.direct.root import DirectRoot, open_direct_root, parse_direct_uri
from statecraft.checkpoint.fencing.object_lease import acquire_object_lease
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, RunAttempt
from statecraft.errors import (
    CheckpointCorruptError,
    DirectSaveError,
    ObjectRequestError,
    ResumeError,
    WriterLeaseError,
)
from statecraft.storage.objects import ObjectStore
from statecraft.storage.s3 import RetryPolicy

FAST = {"retry": RetryPolicy(attempts=1), "connect_timeout_s": 2.0, "read_timeout_s": 5.0}
RUN_TS = "20260101-000000"


def _attempt(tmp_path: Path) -> RunAttempt:
    return RunAttempt(tmp_path / "out" / "p" / "g" / "n" / RUN_TS, RUN_TS, False, True, "test")


def open_root(server: S3Server, tmp_path: Path, prefix: str | None = None, **kw: Any) -> DirectRoot:
    config = CheckpointStoreConfig(
        backend="object_store",
        bucket=BUCKET,
        credentials=str(kw.pop("credentials", server.credentials_file)),
        prefix=prefix or f"direct-{uuid.uuid4().hex[:10]}/checkpoints",
    )
    return open_direct_root(config, _attempt(tmp_path), **FAST)


def _lease(root: DirectRoot, **kw: Any):
    return acquire_object_lease(root.store, ttl_s=600, takeover=kw.pop("takeover", False), **kw)


def test_train_save_resume_bit_exact_from_the_bucket(s3_server: S3Server, tmp_path: Path) -> None:
    """Shards are written to and read from the bucket in place: nothing lands locally."""
    root = open_root(s3_server, tmp_path)
    lease = _lease(root)
    reference = make_tracked()
    train(reference, 3)
    report = save(reference, root, lease=lease)
    assert report.location == f"{root.uri}/iter_000000003"
    train(reference, 3)
    resumed = make_tracked(seed=77)
    assert resume(resumed, root).step == 3
    train(resumed, 3)
    assert_same(state_of(resumed), state_of(reference))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # no local copy, no cache
    assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000003\n"


def test_explicit_uri_and_a_copied_tree_resume(s3_server: S3Server, tmp_path: Path) -> None:
    root = open_root(s3_server, tmp_path)
    reference = make_tracked()
    train(reference, 2)
    save(reference, root, lease=_lease(root))
    bucket, prefix, iteration = parse_direct_uri(f"{root.uri}/iter_000000002")
    assert (bucket, iteration) == (BUCKET, 2)
    client = s3_server.client()
    copy_prefix = f"copied-{uuid.uuid4().hex[:8]}/checkpoints"
    for key in root.bucket.list(prefix + "/"):
        client.copy_object(
            Bucket=BUCKET, Key=copy_prefix + key[len(prefix) :],
            CopySource={"Bucket": BUCKET, "Key": key},
        )  # fmt: skip
    copied = open_root(s3_server, tmp_path, prefix=copy_prefix)
    resumed = make_tracked(seed=3)
    assert resume(resumed, copied, iteration=2).step == 2
    assert_same(state_of(resumed), state_of(reference))


class _Lossy:
    """The real bucket, except one PUT of latest: applied then the response lost
    (``applied=True``), or refused before it was sent."""

    def __init__(self, inner: Any, *, applied: bool) -> None:
        self.inner = inner
        self.applied = applied
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, key: str, data: bytes, **kw: Any) -> str:
        if self.armed and key.endswith(LATEST_POINTER) and data != b"iter_000000002\n":
            self.armed = False
            if self.applied:
                self.inner.put(key, data, **kw)
                raise ObjectRequestError(f"put {key!r}: response lost (it was applied)")
            raise ObjectRequestError(f"put {key!r}: connection reset (not applied)")
        return str(self.inner.put(key, data, **kw))


@pytest.mark.parametrize("applied", [True, False])
def test_retry_after_an_ambiguous_latest_put(
    s3_server: S3Server, tmp_path: Path, applied: bool
) -> None:
    """A lost latest response is read back by the fenced write (the save commits); a refused
    one fails the save with latest unchanged, and the retry of the same save only completes
    latest (the committed iteration is not rewritten)."""
    root = open_root(s3_server, tmp_path)
    lease = _lease(root)
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root, lease=lease)
    train(tracked, 2)
    lossy_store = ObjectStore(_Lossy(root.bucket, applied=applied), prefix=root.store.prefix,
                              name=BUCKET)  # fmt: skip
    lossy = DirectRoot(lossy_store, root.uri, root.bucket)  # type: ignore[arg-type]
    lease.store = lossy_store
    if applied:
        assert not save(tracked, lossy, lease=lease).retried_commit
    else:
        with pytest.raises(ObjectRequestError, match="not applied"):
            save(tracked, lossy, lease=lease)
        assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000002\n"
        manifest = root.store.read_bytes("iter_000000004/.posttrain-manifest.json")
        report = save(tracked, lossy, lease=lease)
        assert report.retried_commit
        assert root.store.read_bytes("iter_000000004/.posttrain-manifest.json") == manifest
    assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000004\n"


def test_two_writers_and_a_stale_one(s3_server: S3Server, tmp_path: Path) -> None:
    """A second job on the same root fails closed naming the owner; after a deliberate
    takeover the old writer commits nothing and latest never moves backwards."""
    root = open_root(s3_server, tmp_path)
    first = _lease(root, host="node-a", pid=111)
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root, lease=first)
    with pytest.raises(WriterLeaseError, match=r"node-a.*111"):
        _lease(open_root(s3_server, tmp_path, prefix=root.store.prefix), host="node-b")
    second = _lease(root, host="node-b", pid=222, takeover=True)
    train(tracked, 2)
    save(tracked, root, lease=second)
    train(tracked, 2)
    with pytest.raises(WriterLeaseError, match="node-b"):
        save(tracked, root, lease=first)  # the stale writer: nothing is written
    assert root.store.stat("iter_000000006") is None
    older = make_tracked()
    train(older, 3)
    with pytest.raises(DirectSaveError, match="newer than iter_000000003"):
        save(older, root, lease=second)  # latest names iter 4: never backwards
    assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000004\n"
    assert root.store.stat("iter_000000003") is None


def test_bad_input_clear_errors_nothing_committed_lost(s3_server: S3Server, tmp_path: Path) -> None:
    root = open_root(s3_server, tmp_path)
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root, lease=_lease(root))
    client, prefix = s3_server.client(), root.store.prefix
    shard = f"{prefix}/iter_000000002/model/__0_0.distcp"
    good = client.get_object(Bucket=BUCKET, Key=shard)["Body"].read()
    fresh = make_tracked(seed=11)
    untouched = state_of(fresh)

    def put(key: str, data: bytes) -> None:
        client.put_object(Bucket=BUCKET, Key=key, Body=data)

    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x10
    put(shard, bytes(flipped))
    with pytest.raises(CheckpointCorruptError, match=r"model/__0_0\.distcp"):
        resume(fresh, root)
    put(shard, good[: len(good) // 2])
    with pytest.raises(CheckpointCorruptError, match=r"model/__0_0\.distcp"):
        resume(fresh, root)
    put(shard, good)

    meta = f"{prefix}/iter_000000002/optim/.metadata"
    saved_meta = client.get_object(Bucket=BUCKET, Key=meta)["Body"].read()
    client.delete_object(Bucket=BUCKET, Key=meta)
    with pytest.raises(CheckpointCorruptError, match=r"optim/\.metadata"):
        resume(fresh, root)
    put(meta, saved_meta)

    trainer = f"{prefix}/iter_000000002/.posttrain/generations/00000001/trainer.pt"
    saved_trainer = client.get_object(Bucket=BUCKET, Key=trainer)["Body"].read()
    client.delete_object(Bucket=BUCKET, Key=trainer)
    with pytest.raises(CheckpointCorruptError, match="control generation 00000001"):
        resume(fresh, root)
    put(trainer, saved_trainer)

    with pytest.raises(ResumeError, match=r"iter_000000009: holds no \.posttrain-manifest"):
        resume(fresh, root, iteration=9)

    wrong = s3_server.write_credentials(tmp_path / "wrong.json", secret="not-the-secret-9876")
    with pytest.raises(ObjectRequestError, match=BUCKET) as refused:
        open_root(s3_server, tmp_path, prefix=prefix, credentials=wrong)
    assert s3_server.secret_key not in str(refused.value)
    wrong.unlink()

    assert_same(state_of(fresh), untouched)
    assert resume(fresh, root).step == 2  # the committed checkpoint is intact


def test_inspect_reads_a_direct_root_written_by_the_save(
    s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``statecraft inspect s3://...`` (h3's, read-only) reads what the direct save wrote: the
    iteration committed, latest, both DCP components, world size 1."""
    import json

    from statecraft.cli import main

    root = open_root(s3_server, tmp_path)
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root, lease=_lease(root))
    capsys.readouterr()
    code = main(["inspect", root.uri, "--credentials", str(s3_server.credentials_file), "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    text = json.dumps(json.loads(out))
    assert "iter_000000002" in text
    assert "committed" in text
    assert "corrupt" not in text
