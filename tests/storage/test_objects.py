"""Tests of statecraft.storage.objects: the simulated bucket (S3 semantics, conditional writes,
injected faults) and the ObjectStore adapter that gives it the Store interface."""

from __future__ import annotations

import pytest
import xxhash

from statecraft.engine import FaultKind, IoGate
from statecraft.errors import StoreConflictError, StoreError
from statecraft.storage import (
    FileRecord,
    FileStat,
    ObjectInfo,
    ObjectRequestError,
    ObjectStore,
    PreconditionFailed,
    SimBucket,
)
from statecraft.storage.digest import Digest


def xxh3(data: bytes) -> Digest:
    """The xxh3_128 digest of ``data``, computed here with ``xxhash`` itself."""
    return Digest("xxh3_128", xxhash.xxh3_128_hexdigest(data))


class TestSimBucket:
    """SimBucket: per-key atomic PUT, strong consistency, If-None-Match / If-Match."""

    def test_put_get_head_list_delete(self) -> None:
        """A put is readable at once; list is sorted by key prefix; delete removes the key."""
        bucket = SimBucket()
        etag = bucket.put("p/b", b"bee")
        bucket.put("p/a", b"ay")
        bucket.put("q", b"queue")
        assert bucket.get("p/b") == b"bee"
        assert bucket.head("p/b") == ObjectInfo(3, etag)
        assert bucket.head("missing") is None
        assert bucket.list("p/") == ["p/a", "p/b"]
        assert bucket.list("") == ["p/a", "p/b", "q"]
        bucket.delete("p/b")
        assert bucket.list("p/") == ["p/a"]
        bucket.delete("p/b")  # deleting an absent key is not an error (S3 semantics)

    def test_get_missing_key(self) -> None:
        """Reading an absent key raises FileNotFoundError naming it."""
        with pytest.raises(FileNotFoundError, match="no object 'nope'"):
            SimBucket().get("nope")

    def test_every_put_gets_a_new_etag(self) -> None:
        """Rewriting a key, even with the same bytes, yields a different etag."""
        bucket = SimBucket()
        first = bucket.put("k", b"same")
        second = bucket.put("k", b"same")
        assert first != second
        assert bucket.head("k") == ObjectInfo(4, second)

    def test_if_none_match_refuses_existing_key(self) -> None:
        """A conditional create of an existing key raises PreconditionFailed; the object is
        unchanged."""
        bucket = SimBucket()
        etag = bucket.put("k", b"original")
        with pytest.raises(PreconditionFailed) as info:
            bucket.put("k", b"intruder", if_none_match=True)
        assert str(info.value) == "If-None-Match: * refused: 'k' exists"
        assert isinstance(info.value, StoreConflictError)
        assert bucket.get("k") == b"original"
        assert bucket.head("k") == ObjectInfo(8, etag)

    def test_if_none_match_creates_absent_key(self) -> None:
        """A conditional create of an absent key succeeds."""
        bucket = SimBucket()
        bucket.put("k", b"first", if_none_match=True)
        assert bucket.get("k") == b"first"

    def test_if_match_with_current_etag_replaces(self) -> None:
        """If-Match with the current etag replaces the object."""
        bucket = SimBucket()
        etag = bucket.put("k", b"v1")
        bucket.put("k", b"v2", if_match=etag)
        assert bucket.get("k") == b"v2"

    def test_if_match_with_wrong_etag_fails(self) -> None:
        """If-Match with a stale etag raises PreconditionFailed naming it; nothing changes."""
        bucket = SimBucket()
        stale = bucket.put("k", b"v1")
        bucket.put("k", b"v2")
        with pytest.raises(PreconditionFailed) as info:
            bucket.put("k", b"v3", if_match=stale)
        assert str(info.value) == f"If-Match: {stale} refused for 'k'"
        assert bucket.get("k") == b"v2"

    def test_if_match_on_absent_key_fails(self) -> None:
        """If-Match on a key that does not exist is refused and creates nothing."""
        bucket = SimBucket()
        with pytest.raises(PreconditionFailed, match="If-Match: \"x\" refused for 'k'"):
            bucket.put("k", b"v", if_match='"x"')
        assert bucket.list("") == []

    def test_lost_response_applies_the_put(self) -> None:
        """A LOST_RESPONSE fault writes the object but the client sees ObjectRequestError."""
        bucket = SimBucket(gate=IoGate(faults={0: FaultKind.LOST_RESPONSE}))
        with pytest.raises(ObjectRequestError) as info:
            bucket.put("k", b"landed")
        assert str(info.value) == "put 'k': response lost (the object WAS written)"
        assert isinstance(info.value, StoreError)
        assert bucket.get("k") == b"landed"

    def test_lost_response_applies_the_delete(self) -> None:
        """A LOST_RESPONSE fault on delete removes the object and still raises."""
        bucket = SimBucket()
        bucket.put("k", b"v")
        bucket.gate = IoGate(faults={0: FaultKind.LOST_RESPONSE})
        with pytest.raises(ObjectRequestError, match="the object WAS deleted"):
            bucket.delete("k")
        assert bucket.head("k") is None

    @pytest.mark.parametrize("kind", [FaultKind.IO_ERROR, FaultKind.NO_SPACE])
    def test_failed_request_does_not_apply(self, kind: FaultKind) -> None:
        """An IO_ERROR (or other non-lost-response) fault fails the put without applying it."""
        bucket = SimBucket()
        bucket.put("k", b"old")
        bucket.gate = IoGate(faults={0: kind})
        with pytest.raises(ObjectRequestError) as info:
            bucket.put("k", b"new")
        assert str(info.value) == f"injected {kind.value} on put 'k' (not applied)"
        assert bucket.get("k") == b"old"

    def test_only_mutations_pass_the_gate(self) -> None:
        """put and delete are crash points; get, head and list are not."""
        gate = IoGate()
        bucket = SimBucket(gate=gate)
        bucket.put("k", b"v")
        bucket.get("k")
        bucket.head("k")
        bucket.list("")
        bucket.delete("k")
        assert [(r.op, r.target) for r in gate.log] == [("put", "k"), ("delete", "k")]

    def test_copy_is_detached(self) -> None:
        """A copy has the same objects, no gate, and does not share later changes."""
        bucket = SimBucket(gate=IoGate())
        bucket.put("k", b"v")
        clone = bucket.copy()
        assert clone.gate is None
        clone.put("k", b"changed")
        clone.put("other", b"x")
        assert bucket.get("k") == b"v"
        assert bucket.list("") == ["k"]
        assert clone.head("k").etag != bucket.head("k").etag  # type: ignore[union-attr]


class TestObjectStore:
    """ObjectStore: the Store interface over a bucket and a key prefix."""

    def test_write_and_read_under_prefix(self) -> None:
        """Paths map to ``prefix/path`` keys; the record carries size and digest."""
        bucket = SimBucket()
        store = ObjectStore(bucket, prefix="/runs/r1/", name="ckpts")
        record = store.write_atomic("iter_1/model.pt", b"weights")
        assert bucket.list("") == ["runs/r1/iter_1/model.pt"]
        assert store.read_bytes("iter_1/model.pt") == b"weights"
        with store.open_read("iter_1/model.pt") as f:
            assert f.read() == b"weights"
        assert record == FileRecord("iter_1/model.pt", 7, xxh3(b"weights"))
        assert store.describe() == "s3://ckpts/runs/r1"
        assert store.local_path("iter_1/model.pt") is None

    def test_write_atomic_replaces(self) -> None:
        """write_atomic over an existing key replaces it."""
        store = ObjectStore(SimBucket())
        store.write_atomic("f", b"one")
        store.write_atomic("f", b"two")
        assert store.read_bytes("f") == b"two"

    def test_create_exclusive_refuses_existing_key(self) -> None:
        """create_exclusive of an existing key raises StoreConflictError (If-None-Match) and
        leaves the object as it was."""
        bucket = SimBucket()
        store = ObjectStore(bucket, prefix="p", name="b")
        store.create_exclusive("marker", b"first")
        with pytest.raises(StoreConflictError) as info:
            store.create_exclusive("marker", b"second")
        assert str(info.value) == (
            "s3://b/p: 'marker' already exists; an exclusive create never overwrites. Inspect "
            "the existing object before deciding what to do"
        )
        assert store.read_bytes("marker") == b"first"

    def test_create_exclusive_after_lost_response_finds_the_object(self) -> None:
        """A conditional create whose response was lost did happen: looking again (a retry)
        meets the object it wrote."""
        bucket = SimBucket(gate=IoGate(faults={0: FaultKind.LOST_RESPONSE}))
        store = ObjectStore(bucket)
        with pytest.raises(ObjectRequestError):
            store.create_exclusive("marker", b"mine")
        with pytest.raises(StoreConflictError):
            store.create_exclusive("marker", b"mine")
        assert store.read_bytes("marker") == b"mine"

    def test_exception_inside_writer_puts_nothing(self) -> None:
        """An exception in the with block aborts: no request is sent."""
        gate = IoGate()
        store = ObjectStore(SimBucket(gate=gate))
        with pytest.raises(RuntimeError, match="serializer failed"):
            failing_write(store, "f")
        assert gate.log == []
        assert store.list() == []

    def test_list_treats_prefixes_as_directories(self) -> None:
        """list reports the next path segment of every key below the directory, once each."""
        store = ObjectStore(SimBucket(), prefix="root")
        for path in ["a.txt", "dir/x", "dir/y", "dir/sub/z", "dirty"]:
            store.write_atomic(path, b".")
        assert store.list() == ["a.txt", "dir", "dirty"]
        assert store.list("dir") == ["sub", "x", "y"]
        assert store.list("dir/sub") == ["z"]
        assert store.list("missing") == []

    def test_stat_treats_prefixes_as_directories(self) -> None:
        """stat is a file for a key, a directory for a key prefix, None otherwise."""
        store = ObjectStore(SimBucket(), prefix="root")
        store.write_atomic("dir/x", b"xyz")
        assert store.stat("dir/x") == FileStat(3, False)
        assert store.stat("dir") == FileStat(0, True)
        assert store.stat("di") is None
        assert store.stat("dir/y") is None

    def test_make_dirs_is_a_validated_no_op(self) -> None:
        """make_dirs sends no request but still refuses a bad path."""
        gate = IoGate()
        store = ObjectStore(SimBucket(gate=gate))
        store.make_dirs("a/b")
        assert gate.log == []
        with pytest.raises(StoreError, match="must be a relative name"):
            store.make_dirs("../a")

    def test_delete_and_delete_tree(self) -> None:
        """delete removes one key; delete_tree removes every key below a directory only."""
        store = ObjectStore(SimBucket(), prefix="root")
        for path in ["d/a", "d/sub/b", "dx", "keep"]:
            store.write_atomic(path, b".")
        store.delete("keep")
        store.delete_tree("d")
        assert store.list() == ["dx"]

    def test_delete_tree_of_a_file_deletes_it(self) -> None:
        """delete_tree on a plain object removes it, as LocalStore.delete_tree does."""
        store = ObjectStore(SimBucket(), prefix="root")
        store.write_atomic("a.txt", b".")
        store.delete_tree("a.txt")
        assert store.stat("a.txt") is None

    @pytest.mark.parametrize("path", ["/abs", "../x", "a//b", "a/./b"])
    def test_bad_paths_are_refused(self, path: str) -> None:
        """Absolute, dotted and empty-segment paths raise StoreError before any request."""
        gate = IoGate()
        store = ObjectStore(SimBucket(gate=gate))
        with pytest.raises(StoreError, match="must be a relative name without"):
            store.write_atomic(path, b"x")
        assert gate.log == []

    def test_writer_refuses_use_after_commit(self) -> None:
        """A committed writer refuses further writes and commits."""
        store = ObjectStore(SimBucket())
        with store.open_atomic("f") as writer:
            writer.write(b"x")
        with pytest.raises(StoreError, match="f: write after commit or abort"):
            writer.write(b"y")
        with pytest.raises(StoreError, match="f: commit after commit or abort"):
            writer.commit()


def failing_write(store: ObjectStore, path: str) -> None:
    """Write into ``open_atomic`` and raise before leaving the block."""
    with store.open_atomic(path) as writer:
        writer.write(b"partial")
        raise RuntimeError("serializer failed")
