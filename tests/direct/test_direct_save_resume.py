"""The direct object-store primary end to end on one process: train, save with
save_direct_checkpoint into a bucket root, resume with resume_direct into fresh objects, train
on: bit-exact against the uninterrupted run. The bucket is the simulated one here (fast); the
SeaweedFS tests (tests/direct/test_direct_s3.py) repeat it against the real server."""

from __future__ import annotations

import json

import attrs
import pytest
import torch

from statecraft.checkpoint.direct.resume import load_direct_checkpoint
from statecraft.checkpoint.direct.saving import save_direct_checkpoint
from statecraft.checkpoint.fencing.object_lease import acquire_object_lease
from statecraft.checkpoint.kernel.layout import LATEST_POINTER
from statecraft.checkpoint.resume.records import Tracked
from statecraft.checkpoint.state import gather_rng_inventory
from statecraft.checkpoint.state.clocks import Outcome
from statecraft.errors import CheckpointCorruptError, PlanDriftError, ResumeError
from statecraft.parallel.collectives import SingleProcess
from statecraft.storage.objects import ObjectStore, SimBucket

PREFIX = "proj/grp/run/20260101-000000/checkpoints"


@attrs.frozen
class Root:
    store: ObjectStore
    uri: str


def make_root(bucket=None, prefix: str = PREFIX) -> Root:
    store = ObjectStore(bucket if bucket is not None else SimBucket(), prefix=prefix, name="b")
    return Root(store, f"s3://b/{prefix}")


def make_tracked(seed: int = 0) -> Tracked:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return Tracked(model=model, optimizer=optimizer, scheduler=scheduler)


def train(tracked: Tracked, steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(5, 4)  # the global RNG: restored by resume
        loss = tracked.model(x).pow(2).mean()
        tracked.optimizer.zero_grad()
        loss.backward()
        tracked.optimizer.step()
        tracked.scheduler.step()
        tracked.clocks.record(Outcome.APPLIED)


def save(tracked: Tracked, root: Root, **kwargs):
    return save_direct_checkpoint(
        tracked,
        root,
        collective=SingleProcess(),
        rng=gather_rng_inventory(rank=0, world_size=1),
        data=None,
        step=tracked.clocks.optimizer_step,
        lease=kwargs.pop("lease", None),
        **kwargs,
    )


def resume(tracked: Tracked, root: Root, iteration=None):
    return load_direct_checkpoint(
        tracked, root.store, collective=SingleProcess(), location=root.uri, iteration=iteration
    )


def state_of(tracked: Tracked) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in tracked.model.parameters()]
    for s in tracked.optimizer.state.values():
        out += [v.clone() for v in s.values() if isinstance(v, torch.Tensor)]
    return out


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


def test_train_save_resume_is_bit_exact() -> None:
    root = make_root()
    reference = make_tracked()
    train(reference, 3)
    report = save(reference, root)
    assert report.location == f"{root.uri}/iter_000000003"
    train(reference, 3)

    resumed = make_tracked(seed=123)  # other initial weights: everything comes from the bucket
    result = resume(resumed, root)
    assert result.step == 3
    train(resumed, 3)
    assert_same(state_of(resumed), state_of(reference))
    assert resumed.clocks.optimizer_step == 6


def test_layout_and_manifest() -> None:
    root = make_root()
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root)
    keys = root.store.client.list(PREFIX + "/")
    names = sorted(k[len(PREFIX) + 1 :] for k in keys)
    assert names == [
        "iter_000000002/.posttrain-manifest.json",
        "iter_000000002/.posttrain/generations/00000001/trainer.pt",
        "iter_000000002/model/.metadata",
        "iter_000000002/model/__0_0.distcp",
        "iter_000000002/optim/.metadata",
        "iter_000000002/optim/__0_0.distcp",
        LATEST_POINTER,
    ]
    doc = json.loads(root.store.read_bytes("iter_000000002/.posttrain-manifest.json"))
    assert doc["schema"] == "statecraft.direct-manifest.v1"
    assert doc["control_generation"] == "00000001"
    assert doc["plan"] == ["model", "optimizer", "training_state"]
    assert doc["writer"]["world_size"] == "1"
    assert set(doc["files"]) == {"model/.metadata", "model/__0_0.distcp", "optim/.metadata",
                                 "optim/__0_0.distcp"}  # fmt: skip
    assert all(not p.startswith("/") for p in doc["files"])


def test_same_iteration_retry_only_confirms_and_drift_fails_closed() -> None:
    root = make_root()
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root)
    before = dict(root.store.client.objects)
    again = save(tracked, root)
    assert again.retried_commit
    assert root.store.client.objects == before  # nothing rewritten, latest confirmed
    bigger = make_tracked()
    bigger.model.append(torch.nn.Linear(2, 2))
    bigger.optimizer = torch.optim.AdamW(bigger.model.parameters(), lr=0.01)
    bigger.scheduler = torch.optim.lr_scheduler.StepLR(bigger.optimizer, step_size=2)
    train(bigger, 2)
    with pytest.raises(PlanDriftError, match=r"committed with another plan \(state layout"):
        save(bigger, root)
    assert root.store.client.objects == before


def test_copied_tree_resumes_from_another_prefix() -> None:
    bucket = SimBucket()
    root = make_root(bucket)
    reference = make_tracked()
    train(reference, 2)
    save(reference, root)
    for key, (data, _) in list(bucket.objects.items()):
        bucket.put(key.replace(PREFIX, "copies/elsewhere"), data)
    copy_root = make_root(bucket, "copies/elsewhere")
    resumed = make_tracked(seed=5)
    assert resume(resumed, copy_root, iteration=2).step == 2
    assert_same(state_of(resumed), state_of(reference))


def test_bad_input_is_refused_with_nothing_loaded() -> None:
    bucket = SimBucket()
    root = make_root(bucket)
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root)
    key = f"{PREFIX}/iter_000000002/model/__0_0.distcp"
    good = bucket.objects[key][0]
    fresh = make_tracked(seed=9)
    untouched = state_of(fresh)

    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x01
    bucket.tamper(key, bytes(flipped))
    with pytest.raises(CheckpointCorruptError, match=r"__0_0\.distcp"):
        resume(fresh, root)
    bucket.tamper(key, good[:-7])
    with pytest.raises(CheckpointCorruptError, match=r"__0_0\.distcp"):
        resume(fresh, root)
    bucket.tamper(key, good)

    meta = f"{PREFIX}/iter_000000002/model/.metadata"
    saved_meta = bucket.objects[meta][0]
    bucket.delete(meta)
    with pytest.raises(CheckpointCorruptError, match=r"\.metadata"):
        resume(fresh, root)
    bucket.put(meta, saved_meta)

    trainer = f"{PREFIX}/iter_000000002/.posttrain/generations/00000001/trainer.pt"
    saved_trainer = bucket.objects[trainer][0]
    bucket.delete(trainer)
    with pytest.raises(CheckpointCorruptError, match="generation 00000001"):
        resume(fresh, root)
    bucket.put(trainer, saved_trainer)

    with pytest.raises(ResumeError, match=r"holds no \.posttrain-manifest\.json"):
        resume(fresh, root, iteration=7)
    assert_same(state_of(fresh), untouched)
    assert resume(fresh, root).step == 2  # the committed checkpoint was never harmed


def test_a_second_writer_is_refused_and_a_stale_one_cannot_commit() -> None:
    bucket = SimBucket()
    root = make_root(bucket)
    first = acquire_object_lease(root.store, ttl_s=600, takeover=False)
    tracked = make_tracked()
    train(tracked, 2)
    save(tracked, root, lease=first)
    from statecraft.errors import WriterLeaseError

    with pytest.raises(WriterLeaseError, match="being written by"):
        acquire_object_lease(root.store, ttl_s=600, takeover=False)
    second = acquire_object_lease(root.store, ttl_s=600, takeover=True)
    train(tracked, 2)
    with pytest.raises(WriterLeaseError):
        save(tracked, root, lease=first)  # the stale writer
    assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000002\n"
    assert root.store.stat("iter_000000004/.posttrain-manifest.json") is None
    save(tracked, root, lease=second)
    assert root.store.read_bytes(LATEST_POINTER) == b"iter_000000004\n"


def test_pristine_optimizer_checkpoint_resumes_bit_exact() -> None:
    """The reference's case: a checkpoint taken before the first step (the optimizer never
    stepped), resumed, then trained: bit-exact against an uninterrupted run (DCP's probe step
    is rolled back on save, and restore resets the optimizer to never-stepped)."""
    root = make_root()
    reference = make_tracked()
    save(reference, root)  # step 0: the optimizer has no state yet
    assert not reference.optimizer.state  # the save left it never-stepped
    train(reference, 3)
    resumed = make_tracked(seed=42)
    train(resumed, 1)  # a stepped live optimizer: resume must reset it to never-stepped
    resumed.clocks = type(resumed.clocks)()
    assert resume(resumed, root).step == 0
    assert not resumed.optimizer.state
    train(resumed, 3)
    assert_same(state_of(resumed), state_of(reference))
