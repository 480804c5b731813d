"""The writer lease's record, published on a thread while ``resume()`` verifies its candidates
(``WriterLease.publish_in_background``): its writes keep their order, the record is durable
before anything loads or is written, and a failed publication fails the resume with nothing
loaded.

Real runs on the real disk (``tests/checkpoint_runs.py``); the I/O gate of ``OsFilesystem``
slows or fails the record's own publication, the way the crash tests inject faults.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from checkpoint_runs import RUN, committed_run, open_checkpointer

from statecraft.checkpoint.fencing.lease import LEASE_NAME, LEASE_SCHEMA, LeaseRecord, acquire_lease
from statecraft.engine.crash import Fault, FaultKind
from statecraft.errors import StoreError, WriterLeaseError
from statecraft.storage import OsFilesystem
from statecraft.storage.local import LocalStore

PUBLISHER = "statecraft-lease-publish"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One attempt holding committed iterations 2, 4, 6 and 8."""
    return committed_run(tmp_path_factory.mktemp("committed") / "out", data=True)


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    """A private copy, without the writer's lease record (a cleanly closed previous run)."""
    copy = tmp_path / "out"
    shutil.copytree(pristine, copy)
    (attempt,) = [p for p in RUN.job_dir(copy).iterdir() if p.is_dir()]
    (attempt / LEASE_NAME).unlink()
    return copy


def lease_path(out: Path) -> Path:
    (attempt,) = [p for p in RUN.job_dir(out).iterdir() if p.is_dir()]
    return attempt / LEASE_NAME


def is_lease_publication(op: str, target: str) -> bool:
    return op in ("link", "rename") and target.endswith(f"/{LEASE_NAME}")


class SlowLease:
    """An I/O gate that logs every gated operation with its thread, and holds the lease
    record's publication (its ``link``) for ``delay_s``: long enough for a resume that did not
    wait for it to load first."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.log: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def before_io(self, op: str, target: str) -> Fault | None:
        if is_lease_publication(op, target):
            time.sleep(self.delay_s)
        with self._lock:
            self.log.append((op, target, threading.current_thread().name))
        return None


class LeaseLinkFails:
    """An I/O gate that fails the lease record's publication (its ``link``) with EIO."""

    def before_io(self, op: str, target: str) -> Fault | None:
        if is_lease_publication(op, target):
            return Fault(FaultKind.IO_ERROR, 0)
        return None


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class TestResumeOverlap:
    def test_the_record_is_durable_before_the_model_loads(
        self, out: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The record is written on the publisher thread, and when the model's
        ``load_state_dict`` runs its link and the run directory's fsync after it are done."""
        gate = SlowLease(delay_s=0.3)
        ckpt, objects = open_checkpointer(out, filesystem=OsFilesystem(gate=gate))
        seen_at_load: list[list[tuple[str, str, str]]] = []
        load = objects.model.load_state_dict

        def recording_load(state: Any, *args: Any, **kwargs: Any) -> Any:
            seen_at_load.append(list(gate.log))
            return load(state, *args, **kwargs)

        monkeypatch.setattr(objects.model, "load_state_dict", recording_load)
        result = ckpt.resume()
        assert result.step == 8
        (before_load,) = seen_at_load
        lease_ops = [(op, t, who) for op, t, who in before_load if LEASE_NAME in t]
        published = [i for i, (op, t, _) in enumerate(before_load) if is_lease_publication(op, t)]
        assert published, f"the record was not published before the model loaded: {before_load}"
        run_dir = str(lease_path(out).parent)
        assert ("fsync_dir", run_dir) in [(op, t) for op, t, _ in before_load[published[0] :]]
        assert {who for _, _, who in lease_ops} == {PUBLISHER}
        record = json.loads(lease_path(out).read_text())
        assert (record["pid"], record["generation"]) == (os.getpid(), 1)
        ckpt.close()
        assert not lease_path(out).exists()

    def test_a_failed_publication_fails_the_resume_with_nothing_loaded(self, out: Path) -> None:
        """The record's publication fails: resume raises the store's error naming the record,
        the model and optimizer are untouched, no record is left; a relaunch resumes."""
        ckpt, objects = open_checkpointer(out, filesystem=OsFilesystem(gate=LeaseLinkFails()))
        before = snapshot(objects.model)
        with pytest.raises(StoreError) as caught:
            ckpt.resume()
        assert LEASE_NAME in str(caught.value)
        after = snapshot(objects.model)
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert objects.optimizer.state_dict()["state"] == {}
        assert objects.cursor.position == 0
        assert not lease_path(out).exists()
        ckpt.close()
        again, _ = open_checkpointer(out)
        assert again.resume().step == 8
        again.close()


class TestBackgroundPublication:
    def test_check_waits_for_the_background_record(self, tmp_path: Path) -> None:
        """``check()`` after ``publish_in_background()`` returns only once the record is on
        disk and ours; ``release()`` then removes it."""
        gate = SlowLease(delay_s=0.2)
        store = LocalStore(str(tmp_path), fs=OsFilesystem(gate=gate))
        lease = acquire_lease(store)
        lease.publish_in_background()
        lease.check()
        assert lease.published
        assert json.loads((tmp_path / LEASE_NAME).read_text())["owner"] == lease.record.owner
        assert {who for op, t, who in gate.log if LEASE_NAME in t} == {PUBLISHER}
        lease.release()
        assert not (tmp_path / LEASE_NAME).exists()

    def test_a_record_published_meanwhile_is_named_and_left_alone(self, tmp_path: Path) -> None:
        """Another owner's record appears before the background publication: ``publish()``
        raises naming it, and ``release()`` leaves that record as it was."""
        store = LocalStore(str(tmp_path))
        lease = acquire_lease(store)
        foreign = LeaseRecord(LEASE_SCHEMA, "elsewhere:1:abc", "elsewhere", 1, 1, "2026-01-01")
        (tmp_path / LEASE_NAME).write_bytes(foreign.encode())
        lease.publish_in_background()
        with pytest.raises(WriterLeaseError, match="owner elsewhere:1:abc"):
            lease.publish()
        assert not lease.published
        lease.release()
        assert (tmp_path / LEASE_NAME).read_bytes() == foreign.encode()
