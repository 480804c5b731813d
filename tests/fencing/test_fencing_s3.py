"""Fencing of a direct object-store root with real processes against the real S3 server
(SeaweedFS): two processes started at once on one root (one commits, the other fails closed
naming the owner), and a writer whose lease was taken over (by expiry, or deliberately) that
can neither commit an iteration nor move ``latest``.

Each child process runs :data:`WRITER`: it takes the lease of the root, and on the parent's
word commits an iteration the way the direct save orders it (``check`` → manifest create with
``If-None-Match`` → ``latest`` with ``If-Match``). Children are coordinated through their
stdin/stdout (no timing); a child's clock may be shifted (``--clock-offset``) to stand for
a lease that has expired.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from s3_server import BUCKET, S3Server

from statecraft.checkpoint.direct.manifest import manifest_path
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, format_latest, parse_latest
from statecraft.storage.objects import ObjectStore
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials

pytestmark = pytest.mark.slow

WRITER = r"""
import json, sys, time
from statecraft.checkpoint.direct.root import DirectRoot
from statecraft.checkpoint.direct.manifest import manifest_path
from statecraft.checkpoint.kernel.layout import LATEST_POINTER, format_latest
from statecraft.checkpoint.fencing.object_lease import acquire_object_lease, write_pointer_fenced
from statecraft.errors import PreconditionFailed, WriterLeaseError
from statecraft.storage.s3 import S3Bucket
from statecraft.storage.s3_credentials import load_credentials

creds, prefix, iteration, offset, takeover = sys.argv[1:6]
bucket = S3Bucket(load_credentials(creds), "ckpt-bucket")
root = DirectRoot.of(bucket, prefix)
say = lambda **kw: print(json.dumps(kw), flush=True)
say(event="ready")
sys.stdin.readline()  # "acquire"
try:
    lease = acquire_object_lease(
        root.store, ttl_s=600, takeover=takeover == "1",
        clock=lambda: time.time() + float(offset),
    )
except WriterLeaseError as exc:
    say(event="refused", message=str(exc), fields=exc.fields)
    sys.exit(3)
say(event="acquired", owner=lease.owner, generation=lease.generation)
sys.stdin.readline()  # "commit"
n = int(iteration)
try:
    root.store.write_atomic(f"iter_{n:09d}/model/__0_0.distcp", b"shard-%d" % n)
    lease.check()
    root.store.put_if(manifest_path(n), b'{"iteration": %d}' % n, if_match=None, if_none_match=True)
    write_pointer_fenced(root.store, lease, LATEST_POINTER, format_latest(n))
except WriterLeaseError as exc:
    say(event="commit-refused", message=str(exc))
    # the race a check cannot close: the latest PUT still carries If-Match on what it saw
    try:
        root.store.put_if(LATEST_POINTER, format_latest(n),
                          if_match=lease.pointers[LATEST_POINTER],
                          if_none_match=lease.pointers[LATEST_POINTER] is None)
        say(event="latest-moved")
    except PreconditionFailed:
        say(event="latest-refused")
    sys.exit(4)
say(event="committed", iteration=n)
"""


class Writer:
    """One child process running :data:`WRITER`."""

    def __init__(
        self, tmp: Path, creds: Path, prefix: str, iteration: int, *, offset: float = 0.0,
        takeover: bool = False,
    ) -> None:  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(creds), prefix, str(iteration), str(offset),
             "1" if takeover else "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path.cwd())},
        )  # fmt: skip
        assert self.read()["event"] == "ready"

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            _, err = self.proc.communicate(timeout=60)
            raise AssertionError(f"writer ended without a word: {err}")
        event: dict[str, Any] = json.loads(line)
        return event

    def send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def finish(self) -> int:
        self.proc.communicate(timeout=60)
        return self.proc.returncode


@pytest.fixture
def root(s3_server: S3Server) -> tuple[ObjectStore, str]:
    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    prefix = f"fencing-{uuid.uuid4().hex[:8]}/checkpoints"
    return ObjectStore(bucket, prefix=prefix, name=BUCKET), prefix


def test_two_processes_one_root(
    s3_server: S3Server, tmp_path: Path, root: tuple[ObjectStore, str]
) -> None:
    """Both are told to acquire at once: exactly one commits; the other fails closed naming
    the winner's host and PID, and writes nothing."""
    store, prefix = root
    a = Writer(tmp_path, s3_server.credentials_file, prefix, 4)
    b = Writer(tmp_path, s3_server.credentials_file, prefix, 5)
    a.send("acquire")
    b.send("acquire")
    first, second = a.read(), b.read()
    events = {"a": first, "b": second}
    winners = [name for name, event in events.items() if event["event"] == "acquired"]
    assert len(winners) == 1, events
    winner = a if winners == ["a"] else b
    loser_event = second if winners == ["a"] else first
    assert loser_event["event"] == "refused"
    assert f"PID {winner.proc.pid}" in loser_event["message"]
    assert loser_event["fields"]["pid"] == winner.proc.pid
    assert "statecraft lease takeover" in loser_event["message"]
    winner.send("commit")
    committed = winner.read()
    assert committed["event"] == "committed"
    assert (a.finish(), b.finish()) in ((0, 3), (3, 0))
    assert parse_latest(store.read_bytes(LATEST_POINTER)) == committed["iteration"]
    other = 5 if committed["iteration"] == 4 else 4
    assert store.list(f"iter_{other:09d}") == []


@pytest.mark.parametrize("how", ["expired", "deliberate"])
def test_taken_over_writer_cannot_commit(
    s3_server: S3Server, tmp_path: Path, root: tuple[ObjectStore, str], how: str
) -> None:
    """A commits iter_4 and dies holding the lease; S, on the same host, takes it over (A's
    PID is gone). Then B takes the lease from S (S's lease expired by B's clock, or a
    deliberate takeover) and commits iter_6. S, still running, tries to commit iter_5: its
    check refuses naming B, and even a latest PUT past the check is refused (If-Match):
    latest stays iter_6 and iter_5 has no manifest."""
    store, prefix = root
    a = Writer(tmp_path, s3_server.credentials_file, prefix, 4)
    a.send("acquire")
    assert a.read()["event"] == "acquired"
    a.send("commit")
    assert a.read() == {"event": "committed", "iteration": 4}
    a.finish()
    # A died holding its lease (no release); A's PID is gone from this host, so S takes the
    # lease over without waiting for the expiry. S then becomes the stale writer.
    s = Writer(tmp_path, s3_server.credentials_file, prefix, 5)
    s.send("acquire")
    held = s.read()
    assert held["event"] == "acquired"
    assert held["generation"] == 2
    offset = 601.0 if how == "expired" else 0.0
    b = Writer(
        tmp_path, s3_server.credentials_file, prefix, 6, offset=offset,
        takeover=how == "deliberate",
    )  # fmt: skip
    b.send("acquire")
    took = b.read()
    assert took["event"] == "acquired"
    assert took["generation"] == 3
    b.send("commit")
    assert b.read() == {"event": "committed", "iteration": 6}
    assert b.finish() == 0
    s.send("commit")
    refusal = s.read()
    assert refusal["event"] == "commit-refused"
    assert "taken over by owner" in refusal["message"]
    assert f"PID {b.proc.pid}" in refusal["message"]
    assert s.read()["event"] == "latest-refused"
    assert s.finish() == 4
    assert parse_latest(store.read_bytes(LATEST_POINTER)) == 6
    assert store.stat(manifest_path(5)) is None
    assert store.read_bytes(manifest_path(4)) == b'{"iteration": 4}'
    assert store.read_bytes(LATEST_POINTER) == format_latest(6)
