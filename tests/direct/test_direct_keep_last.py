"""``checkpoint_store.keep_last``: the direct object-store primary's retention (issue 28 item 5)
against the real S3 server (SeaweedFS): after each save the root holds the newest N committed
iterations, latest is never removed, a writer whose lease was taken over deletes nothing, and
the run resumes bit-exact from what is left."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from s3_server import BUCKET, S3Server
from test_direct_s3 import FAST, _attempt, _lease
from test_direct_save_resume import assert_same, make_tracked, resume, save, state_of, train

from statecraft.checkpoint.config.schema import CheckpointStoreConfig
from statecraft.checkpoint.direct.retention import retain_direct
from statecraft.checkpoint.direct.root import DirectRoot, open_direct_root
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, MANIFEST_NAME
from statecraft.errors import WriterLeaseError


def _root(server: S3Server, tmp_path: Path, keep_last: int, prefix: str = "") -> DirectRoot:
    config = CheckpointStoreConfig(
        backend="object_store",
        bucket=BUCKET,
        credentials=str(server.credentials_file),
        prefix=prefix or f"keep-{uuid.uuid4().hex[:10]}/checkpoints",
        keep_last=keep_last,
    )
    return open_direct_root(config, _attempt(tmp_path), **FAST)


def _iterations(root: DirectRoot) -> dict[int, bool]:
    """iteration -> committed (its manifest is there), from one listing of the bucket."""
    found: dict[int, bool] = {}
    for key in root.bucket.list(f"{root.prefix}/"):
        head, _, rest = key[len(root.prefix) + 1 :].partition("/")
        if head.startswith("iter_") and rest:
            n = int(head[5:])
            found[n] = found.get(n, False) or rest == MANIFEST_NAME
    return found


def _three_saves(server: S3Server, tmp_path: Path, *, leased: bool) -> tuple[DirectRoot, Any]:
    """A root with keep_last=0 holding iterations 1, 2 and 3, saved under a writer lease when
    ``leased`` (the lease is returned, else ``None``)."""
    keep_all = _root(server, tmp_path, keep_last=0)
    lease = _lease(keep_all) if leased else None
    tracked = make_tracked()
    for _ in range(3):
        train(tracked, 1)
        save(tracked, keep_all, lease=lease)
    return keep_all, lease


def test_each_save_keeps_the_newest_two(s3_server: S3Server, tmp_path: Path) -> None:
    """Four saves with keep_last=2 leave iterations 3 and 4 committed and nothing of 1 and 2;
    latest names 4 and the run resumes from it bit-exact."""
    root = _root(s3_server, tmp_path, keep_last=2)
    lease = _lease(root)
    reference = make_tracked()
    for _ in range(4):
        train(reference, 1)
        save(reference, root, lease=lease)
    assert _iterations(root) == {3: True, 4: True}
    assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000004\n"
    resumed = make_tracked(seed=5)
    assert resume(resumed, root).step == 4
    assert_same(state_of(resumed), state_of(reference))


def test_latest_is_never_removed(s3_server: S3Server, tmp_path: Path) -> None:
    """With latest pointed back at iteration 1, keep_last=1 keeps 3 (the newest) and 1 (named
    by latest) and removes only 2."""
    keep_all, _ = _three_saves(s3_server, tmp_path, leased=False)
    keep_all.store.write_atomic(LATEST_POINTER, b"iter_000000001\n")
    root = _root(s3_server, tmp_path, keep_last=1, prefix=keep_all.prefix)
    report = retain_direct(root, lease=None)
    assert report is not None
    assert report.deleted == (2,)
    assert {r.iteration: r.reason for r in report.rows if r.action == "keep"} == {
        3: "newest published",
        1: "named by latest",
    }
    assert _iterations(root) == {1: True, 3: True}


def test_a_writer_whose_lease_was_taken_over_deletes_nothing(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The lease is checked before each commit record is deleted: a stale writer's retention
    raises WriterLeaseError and every iteration stays committed."""
    keep_all, stale = _three_saves(s3_server, tmp_path, leased=True)
    _lease(keep_all, takeover=True)  # a second launch took the root over
    root = _root(s3_server, tmp_path, keep_last=1, prefix=keep_all.prefix)
    with pytest.raises(WriterLeaseError):
        retain_direct(root, lease=stale)
    assert _iterations(root) == {1: True, 2: True, 3: True}


def test_keep_last_zero_keeps_everything(s3_server: S3Server, tmp_path: Path) -> None:
    """The default (0) removes nothing."""
    root = _root(s3_server, tmp_path, keep_last=0)
    tracked = make_tracked()
    for _ in range(3):
        train(tracked, 1)
        save(tracked, root)
    assert retain_direct(root, lease=None) is None
    assert _iterations(root) == {1: True, 2: True, 3: True}
