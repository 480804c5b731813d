"""A job the scheduler requeued on another node takes its own object lease over at once (issue
28 item 7); every other owner is still refused until the lease expires. Against the simulated
bucket and the real S3 server (SeaweedFS); the second host is simulated by ``host=``, the
scheduler by ``environ=`` (``SLURM_JOB_ID`` / ``SLURM_RESTART_COUNT``); time is an injected
clock.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator

import pytest
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.fencing.object_lease import (
    OBJECT_LEASE_NAME,
    ObjectStoreLease,
    acquire_object_lease,
    read_object_lease,
)
from statecraft.checkpoint.fencing.scheduler_job import SchedulerJob, scheduler_job
from statecraft.errors import WriterLeaseError
from statecraft.storage.objects import ObjectStore, SimBucket
from statecraft.storage.s3 import RetryPolicy, S3Bucket
from statecraft.storage.s3_credentials import load_credentials

T0 = 1_800_000_000.0
TTL = 600.0


@pytest.fixture(params=["sim", "s3"])
def store(request: pytest.FixtureRequest) -> Iterator[ObjectStore]:
    if request.param == "sim":
        yield ObjectStore(SimBucket(), prefix="proj/run/checkpoints", name="sim-bucket")
        return
    server: S3Server = request.getfixturevalue("s3_server")
    bucket = S3Bucket(
        load_credentials(server.credentials_file), BUCKET, retry=RetryPolicy(attempts=2)
    )
    yield ObjectStore(bucket, prefix=f"requeue-{uuid.uuid4().hex[:10]}/checkpoints", name=BUCKET)


def slurm(job: str, restart: int | None = None) -> dict[str, str]:
    env = {"SLURM_JOB_ID": job}
    if restart is not None:
        env["SLURM_RESTART_COUNT"] = str(restart)
    return env


def take(store: ObjectStore, host: str, environ: dict[str, str], *, pid: int = 4242,
         now: float = T0) -> ObjectStoreLease:  # fmt: skip
    return acquire_object_lease(
        store, ttl_s=TTL, takeover=False, clock=lambda: now, host=host, pid=pid, environ=environ
    )


class TestSchedulerJob:
    def test_read_from_the_environment(self) -> None:
        assert scheduler_job({}) is None
        assert scheduler_job(slurm("77")) == SchedulerJob("slurm:77", 0)
        assert scheduler_job(slurm("77", 3)) == SchedulerJob("slurm:77", 3)
        assert scheduler_job(slurm("77") | {"SLURM_RESTART_COUNT": "x"}) is None
        assert scheduler_job(slurm("77") | {"SLURM_RESTART_COUNT": "-1"}) is None

    def test_requeue_of(self) -> None:
        job = SchedulerJob("slurm:77", 2)
        assert job.requeue_of("slurm:77", 1)
        assert not job.requeue_of("slurm:77", 2)
        assert not job.requeue_of("slurm:77", 3)
        assert not job.requeue_of("slurm:78", 0)
        assert not job.requeue_of(None, None)
        assert not job.requeue_of("slurm:77", None)


class TestRequeue:
    def test_requeued_on_another_node_takes_over_at_once(
        self, store: ObjectStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Node A's incarnation (restart 0) holds a live lease; the requeue on node B
        (restart 1) takes it at once, logged; node A's handle is fenced off."""
        first = take(store, "node-a", slurm("77"))
        raw = json.loads(store.read_bytes(OBJECT_LEASE_NAME))
        assert (raw["job"], raw["restart_count"]) == ("slurm:77", 0)
        caplog.set_level(logging.WARNING, logger="statecraft.lease")
        second = take(store, "node-b", slurm("77", 1), now=T0 + 5)
        assert second.generation == first.generation + 1
        assert second.record.host == "node-b"
        assert second.previous is not None
        assert second.previous.owner == first.owner
        found = read_object_lease(store)
        assert found is not None
        assert found[0].owner == second.owner
        assert (found[0].job, found[0].restart_count) == ("slurm:77", 1)
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert "requeued the same job" in logged
        assert first.owner in logged
        with pytest.raises(WriterLeaseError):
            first.check()
        second.check()

    @pytest.mark.parametrize(
        ("label", "environ"),
        [
            ("another job", slurm("78", 1)),
            ("same restart count", slurm("77", 0)),
            ("no restart count", slurm("77")),
            ("no scheduler", {}),
        ],
    )
    def test_anyone_else_is_refused_until_expiry(
        self, store: ObjectStore, label: str, environ: dict[str, str]
    ) -> None:
        first = take(store, "node-a", slurm("77", 0))
        with pytest.raises(WriterLeaseError) as refused:
            take(store, "node-b", environ, now=T0 + 5)
        message = str(refused.value)
        assert "node-a" in message
        assert "job slurm:77 restart 0" in message
        assert "SLURM_RESTART_COUNT" in message
        first.check()  # still ours, untouched
        later = take(store, "node-b", environ, now=T0 + TTL + 1)  # expired: the old rule
        assert later.generation == first.generation + 1

    def test_an_earlier_restart_never_takes_a_later_one(self, store: ObjectStore) -> None:
        """A stale incarnation (restart 1) cannot take the lease of restart 2."""
        held = take(store, "node-b", slurm("77", 2))
        with pytest.raises(WriterLeaseError):
            take(store, "node-a", slurm("77", 1), now=T0 + 5)
        held.check()

    def test_a_lease_without_a_job_is_not_taken_by_a_restart(self, store: ObjectStore) -> None:
        """A lease written outside a scheduler (or by an older statecraft) records no job: no
        restart of any job can claim it."""
        first = take(store, "node-a", {})
        raw = json.loads(store.read_bytes(OBJECT_LEASE_NAME))
        assert "job" not in raw
        assert "restart_count" not in raw
        with pytest.raises(WriterLeaseError):
            take(store, "node-b", slurm("77", 5), now=T0 + 5)
        first.check()

    def test_renewal_keeps_the_job(self, store: ObjectStore) -> None:
        clock = [T0]
        lease = acquire_object_lease(
            store, ttl_s=TTL, takeover=False, clock=lambda: clock[0], host="node-a", pid=1,
            environ=slurm("77", 4),
        )  # fmt: skip
        clock[0] += TTL
        lease.renew()
        found = read_object_lease(store)
        assert found is not None
        assert (found[0].job, found[0].restart_count) == ("slurm:77", 4)
