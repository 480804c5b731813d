"""The object-store writer lease (statecraft.checkpoint.fencing.object_lease) against the simulated
bucket AND the real S3 server (SeaweedFS, the ``s3_server`` fixture): acquisition by
conditional create, refusal of a live owner (named), expiry and takeover, deliberate takeover,
renewal, release, the fenced ``latest`` pointer, and the ``Lease`` protocol.

Time is an injected clock: no test sleeps.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.fencing.lease import Lease, WriterLease, acquire_lease
from statecraft.checkpoint.fencing.object_lease import (
    OBJECT_LEASE_NAME,
    ObjectStoreLease,
    acquire_object_lease,
    read_object_lease,
    write_pointer_fenced,
)
from statecraft.checkpoint.fencing.object_lease_record import parse_iso_utc
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, format_latest
from statecraft.engine.crash import FaultKind, IoGate
from statecraft.errors import ObjectRequestError, PreconditionFailed, WriterLeaseError
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ObjectStore, SimBucket
from statecraft.storage.s3 import RetryPolicy, S3Bucket
from statecraft.storage.s3_credentials import load_credentials

T0 = 1_800_000_000.0
TTL = 600.0


class Clock:
    """A settable clock (unix seconds)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(params=["sim", "s3"])
def store(request: pytest.FixtureRequest) -> Iterator[ObjectStore]:
    """A fresh checkpoints root: on a SimBucket, or under a unique prefix of the real server."""
    if request.param == "sim":
        yield ObjectStore(SimBucket(), prefix="proj/run/checkpoints", name="sim-bucket")
        return
    server: S3Server = request.getfixturevalue("s3_server")
    bucket = S3Bucket(
        load_credentials(server.credentials_file), BUCKET, retry=RetryPolicy(attempts=2)
    )
    prefix = f"lease-{uuid.uuid4().hex[:10]}/checkpoints"
    yield ObjectStore(bucket, prefix=prefix, name=BUCKET)


def _acquire(store: ObjectStore, clock: Clock, *, pid: int, takeover: bool = False):
    return acquire_object_lease(
        store, ttl_s=TTL, takeover=takeover, clock=clock, host="node-a", pid=pid
    )


class TestPutIf:
    def test_conditions(self, store: ObjectStore) -> None:
        etag = store.put_if("p", b"1", if_match=None, if_none_match=True)
        assert store.stat_etag("p") == etag
        with pytest.raises(PreconditionFailed):
            store.put_if("p", b"2", if_match=None, if_none_match=True)
        with pytest.raises(PreconditionFailed):
            store.put_if("p", b"2", if_match='"nope"', if_none_match=False)
        second = store.put_if("p", b"2", if_match=etag, if_none_match=False)
        assert second != etag
        assert store.read_bytes("p") == b"2"
        assert store.stat_etag("absent") is None
        with pytest.raises(ValueError, match="not both"):
            store.put_if("p", b"3", if_match=second, if_none_match=True)


class TestAcquire:
    def test_two_writers_one_root(self, store: ObjectStore) -> None:
        """The first acquires; the second fails closed naming the owner and the fix."""
        clock = Clock()
        first = _acquire(store, clock, pid=101)
        assert first.generation == 1
        with pytest.raises(WriterLeaseError) as refused:
            _acquire(store, clock, pid=202)
        message = str(refused.value)
        assert "node-a" in message
        assert "PID 101" in message
        assert first.owner in message
        assert first.record.expires in message
        assert "since" in message
        assert "statecraft lease takeover" in message
        assert "lease_takeover" in message
        assert refused.value.fields["pid"] == 101
        first.check()  # still ours

    def test_expired_lease_taken_over(
        self, store: ObjectStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        clock = Clock()
        dead = _acquire(store, clock, pid=101)
        clock.advance(TTL + 1)
        with caplog.at_level(logging.WARNING, logger="statecraft.lease"):
            heir = _acquire(store, clock, pid=202)
        assert heir.generation == 2
        assert heir.previous == dead.record
        assert any("took over the expired" in r.getMessage() for r in caplog.records)
        with pytest.raises(WriterLeaseError, match=r"taken over by owner .*PID 202"):
            dead.check()
        with pytest.raises(WriterLeaseError, match="taken over"):
            dead.renew()

    def test_deliberate_takeover_of_live_lease(self, store: ObjectStore) -> None:
        clock = Clock()
        first = _acquire(store, clock, pid=101)
        second = _acquire(store, clock, pid=202, takeover=True)
        assert second.generation == 2
        with pytest.raises(WriterLeaseError):
            first.check()
        second.check()

    def test_dead_owner_on_this_host_is_taken_over(self, store: ObjectStore) -> None:
        """An unexpired lease whose owner ran on this host and whose PID is gone is taken
        over at once (a relaunch after SIGKILL); a live PID on this host is refused."""
        import socket
        import subprocess
        import sys

        done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
        dead_pid = int(done.stdout)
        clock = Clock()
        host = socket.gethostname()
        acquire_object_lease(store, ttl_s=TTL, takeover=False, clock=clock, host=host, pid=dead_pid)
        heir = acquire_object_lease(store, ttl_s=TTL, takeover=False, clock=clock)
        assert heir.generation == 2
        with pytest.raises(WriterLeaseError, match=f"PID {os.getpid()}"):
            acquire_object_lease(store, ttl_s=TTL, takeover=False, clock=clock, pid=1)

    def test_release_lets_the_next_writer_in(self, store: ObjectStore) -> None:
        clock = Clock()
        first = _acquire(store, clock, pid=101)
        first.release()
        first.release()  # idempotent
        with pytest.raises(WriterLeaseError, match="released"):
            first.check()
        nxt = _acquire(store, clock, pid=202)
        assert nxt.generation == 2

    def test_release_of_a_lost_lease_leaves_it(self, store: ObjectStore) -> None:
        clock = Clock()
        first = _acquire(store, clock, pid=101)
        second = _acquire(store, clock, pid=202, takeover=True)
        first.release()
        second.check()
        found = read_object_lease(store)
        assert found is not None
        assert found[0] == second.record

    def test_bad_ttl(self, store: ObjectStore) -> None:
        for bad in (0, -1.0, True):
            with pytest.raises(ValueError, match="ttl_s"):
                acquire_object_lease(store, ttl_s=bad, takeover=False)
        assert store.stat_etag(OBJECT_LEASE_NAME) is None

    def test_malformed_lease_refused(self, store: ObjectStore) -> None:
        store.write_atomic(OBJECT_LEASE_NAME, b'{"schema": "statecraft.object-lease.v1"}')
        with pytest.raises(WriterLeaseError, match=r"violates specs/object-lease\.schema\.json"):
            _acquire(store, Clock(), pid=1)
        store.write_atomic(OBJECT_LEASE_NAME, b"garbage")
        with pytest.raises(WriterLeaseError, match="not JSON"):
            _acquire(store, Clock(), pid=1)


class TestRenew:
    def test_renews_only_after_half_the_ttl(self, store: ObjectStore) -> None:
        clock = Clock()
        lease = _acquire(store, clock, pid=101)
        etag = lease.etag
        clock.advance(TTL / 2 - 1)
        assert lease.renew_if_due() is False
        assert lease.etag == etag
        clock.advance(2)
        assert lease.renew_if_due() is True
        assert lease.etag != etag
        assert parse_iso_utc(lease.record.expires) == pytest.approx(clock.now + TTL)
        lease.check()
        # a renewed lease is live for another ttl: a second writer is still refused
        clock.advance(TTL - 1)
        with pytest.raises(WriterLeaseError, match="PID 101"):
            _acquire(store, clock, pid=202)

    def test_check_renews_an_expired_but_untaken_lease(self, store: ObjectStore) -> None:
        clock = Clock()
        lease = _acquire(store, clock, pid=101)
        clock.advance(TTL * 2)
        lease.check()  # nobody took it: the If-Match renewal proves it is ours
        assert parse_iso_utc(lease.record.expires) == pytest.approx(clock.now + TTL)

    def test_deleted_lease_refuses(self, store: ObjectStore) -> None:
        lease = _acquire(store, Clock(), pid=101)
        store.delete(OBJECT_LEASE_NAME)
        with pytest.raises(WriterLeaseError, match="is gone"):
            lease.check()


class TestFencedPointer:
    def test_stale_writer_cannot_move_latest(self, store: ObjectStore) -> None:
        """A writes latest=4; B takes over and writes latest=6; A can neither check nor move
        latest (back to 5), and latest stays 6."""
        clock = Clock()
        a = _acquire(store, clock, pid=101)
        write_pointer_fenced(store, a, LATEST_POINTER, format_latest(4))
        clock.advance(TTL + 1)
        b = _acquire(store, clock, pid=202)
        write_pointer_fenced(store, b, LATEST_POINTER, format_latest(6))
        with pytest.raises(WriterLeaseError, match="PID 202"):
            write_pointer_fenced(store, a, LATEST_POINTER, format_latest(5))
        assert store.read_bytes(LATEST_POINTER) == format_latest(6)

    def test_if_match_guards_the_window_after_check(self, store: ObjectStore) -> None:
        """Even when the stale writer's check passes (it raced ahead of the takeover's
        lease write), its pointer PUT carries If-Match on its old etag and fails."""
        clock = Clock()
        a = _acquire(store, clock, pid=101)
        write_pointer_fenced(store, a, LATEST_POINTER, format_latest(4))
        seen = a.pointers[LATEST_POINTER]
        # someone else (without the lease protocol) moved latest
        store.write_atomic(LATEST_POINTER, format_latest(9))
        with pytest.raises(WriterLeaseError, match="changed by another writer"):
            write_pointer_fenced(store, a, LATEST_POINTER, format_latest(5))
        assert store.read_bytes(LATEST_POINTER) == format_latest(9)
        assert a.pointers[LATEST_POINTER] == seen

    def test_absent_pointer_is_created_once(self, store: ObjectStore) -> None:
        clock = Clock()
        a = _acquire(store, clock, pid=101)
        assert a.pointers == {LATEST_POINTER: None}
        store.write_atomic(LATEST_POINTER, format_latest(2))  # appeared after acquisition
        with pytest.raises(WriterLeaseError, match="changed by another writer"):
            write_pointer_fenced(store, a, LATEST_POINTER, format_latest(3))
        assert store.read_bytes(LATEST_POINTER) == format_latest(2)

    def test_sequential_writes(self, store: ObjectStore) -> None:
        clock = Clock()
        a = _acquire(store, clock, pid=101)
        for step in (2, 4, 6):
            write_pointer_fenced(store, a, LATEST_POINTER, format_latest(step))
        assert store.read_bytes(LATEST_POINTER) == format_latest(6)
        a.release()
        b = _acquire(store, clock, pid=202)
        assert b.pointers[LATEST_POINTER] == store.stat_etag(LATEST_POINTER)
        write_pointer_fenced(store, b, LATEST_POINTER, format_latest(8))


class TestRecord:
    def test_record_fields(self) -> None:
        store = ObjectStore(SimBucket(), prefix="r", name="sim-bucket")
        lease = _acquire(store, Clock(), pid=7)
        raw = json.loads(store.read_bytes(OBJECT_LEASE_NAME))
        assert raw["schema"] == "statecraft.object-lease.v1"
        assert set(raw) == {
            "schema",
            "owner",
            "host",
            "pid",
            "generation",
            "acquired",
            "renewed",
            "expires",
            "ttl_s",
            "released",
        }
        assert raw["expires"].endswith("+00:00")
        assert raw["ttl_s"] == TTL
        assert lease.where == f"s3://sim-bucket/r/{OBJECT_LEASE_NAME}"

    def test_both_leases_satisfy_the_protocol(self, tmp_path: Path) -> None:
        store = ObjectStore(SimBucket(), prefix="r", name="sim-bucket")
        lease: Lease = _acquire(store, Clock(), pid=7)
        assert isinstance(lease, ObjectStoreLease)
        assert isinstance(lease, Lease)
        local: Lease = acquire_lease(LocalStore(str(tmp_path)))
        try:
            assert isinstance(local, WriterLease)
            assert isinstance(local, Lease)
        finally:
            local.release()


class TestLargePut:
    def test_large_object_goes_by_multipart(self, s3_server: S3Server) -> None:
        """An ObjectStore write above one part (a big DCP shard) is a multipart upload from
        memory: the bytes and the stored sha256 read back equal, and If-None-Match holds."""
        import hashlib
        import os

        from statecraft.storage.s3 import TransferSettings

        bucket = S3Bucket(
            load_credentials(s3_server.credentials_file),
            BUCKET,
            transfer=TransferSettings(part_size=5 << 20, concurrency=2),
        )
        store = ObjectStore(bucket, prefix=f"large-{uuid.uuid4().hex[:8]}", name=BUCKET)
        data = os.urandom((11 << 20) + 5)
        record = store.create_exclusive("model/__0_0.distcp", data)
        assert record.size == len(data)
        assert store.read_bytes("model/__0_0.distcp") == data
        there = bucket.stat(store.key("model/__0_0.distcp"))
        assert there is not None
        assert there.sha256 == hashlib.sha256(data).hexdigest()
        assert there.etag.strip('"').endswith("-3")  # three parts
        with pytest.raises(PreconditionFailed):
            store.put_if("model/__0_0.distcp", data, if_match=None, if_none_match=True)
        etag = store.put_if(
            "model/__0_0.distcp", b"small", if_match=there.etag, if_none_match=False
        )
        assert store.stat_etag("model/__0_0.distcp") == etag


class TestIndeterminateRequests:
    """A request whose response was lost (applied, the client saw an error) is resolved by
    reading back; one that failed unapplied raises and changes nothing (SimBucket faults)."""

    def _store(self, faults: dict[int, FaultKind]) -> ObjectStore:
        return ObjectStore(SimBucket(gate=IoGate(faults=faults)), prefix="r", name="sim-bucket")

    def test_lost_responses_are_adopted(self) -> None:
        # PUT #0: the lease create, #1: the renewal, #2: the latest write
        store = self._store({n: FaultKind.LOST_RESPONSE for n in (0, 1, 2)})
        clock = Clock()
        lease = _acquire(store, clock, pid=1)
        lease.check()
        clock.advance(TTL)
        assert lease.renew_if_due() is True
        lease.check()
        write_pointer_fenced(store, lease, LATEST_POINTER, format_latest(2))
        assert lease.pointers[LATEST_POINTER] == store.stat_etag(LATEST_POINTER)
        write_pointer_fenced(store, lease, LATEST_POINTER, format_latest(4))
        assert store.read_bytes(LATEST_POINTER) == format_latest(4)

    def test_failed_pointer_write_changes_nothing_and_can_be_retried(self) -> None:
        store = self._store({1: FaultKind.IO_ERROR})
        lease = _acquire(store, Clock(), pid=1)
        with pytest.raises(ObjectRequestError):
            write_pointer_fenced(store, lease, LATEST_POINTER, format_latest(2))
        assert store.stat_etag(LATEST_POINTER) is None
        assert lease.pointers[LATEST_POINTER] is None
        write_pointer_fenced(store, lease, LATEST_POINTER, format_latest(2))
        assert store.read_bytes(LATEST_POINTER) == format_latest(2)
