"""A ``torchdata`` ``StatefulDataLoader`` in one process: the identity statecraft reads from it,
an unseeded shuffled loader resuming exactly (its generator state is part of the cursor), and a
changed batch size or ``DistributedSampler`` seed following the geometry rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.data import describe_source
from statecraft.errors import ResumeError

stateful = pytest.importorskip("torchdata.stateful_dataloader")


def _loader(**kwargs: Any) -> Any:
    return stateful.StatefulDataLoader(list(range(32)), **{"batch_size": 4, **kwargs})


def _ckpt(out: Path, loader: Any, *overrides: str) -> sc.Checkpointer:
    model = torch.nn.Linear(2, 1)
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, ["save_every=1", "save_async=false", *overrides]),
        run=sc.RunIdentity("p", "g", "stateful"),
        output_root=out,
    )
    ckpt.track(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data=loader)
    return ckpt


def _consume(ckpt: sc.Checkpointer, batches: Any, steps: int) -> None:
    """``steps`` training steps over the iterator ``batches``, each saved."""
    for _ in range(steps):
        next(batches)
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()


def test_the_identity_read_from_the_loader() -> None:
    sampler = torch.utils.data.DistributedSampler(list(range(32)), num_replicas=2, rank=1, seed=7)
    identity = describe_source(_loader(sampler=sampler), declared=None, world_size=2)
    assert (identity.kind, identity.exact, identity.batch_size) == ("stateful_dataloader", True, 4)
    assert (identity.seed, identity.sharding) == (7, "DistributedSampler(shuffle=True)")
    plain = describe_source(_loader(shuffle=True), declared=None, world_size=1)
    assert (plain.seed, plain.sharding) == (None, None)


def test_an_unseeded_shuffled_loader_resumes_exactly(tmp_path: Path) -> None:
    """Two loaders built under different global seeds: the resumed one continues the saved
    order, because the generator state is restored with the cursor."""
    torch.manual_seed(1)
    loader = _loader(shuffle=True)
    ckpt = _ckpt(tmp_path, loader, "data.cursor_resume=strict")
    ckpt.resume()
    batches = iter(loader)
    _consume(ckpt, batches, 3)
    expected = [b.tolist() for b in batches]  # the rest of the epoch, after the save of step 3
    ckpt.close()
    torch.manual_seed(2)
    fresh = _loader(shuffle=True)
    again = _ckpt(tmp_path, fresh, "data.cursor_resume=strict")
    result = again.resume()
    again.close()
    assert (result.step, result.data) == (3, "restored")
    assert [b.tolist() for b in fresh] == expected
    assert len(expected) == 5


def test_a_changed_batch_size_restarts_under_auto_and_is_refused_under_strict(
    tmp_path: Path,
) -> None:
    loader = _loader()
    ckpt = _ckpt(tmp_path, loader)
    ckpt.resume()
    _consume(ckpt, iter(loader), 2)
    ckpt.close()
    fresh = _loader(batch_size=8)
    again = _ckpt(tmp_path, fresh)
    result = again.resume()
    again.close()
    assert result.data == "geometry_changed"
    assert next(iter(fresh)).tolist() == list(range(8))  # the epoch restarted
    strict = _ckpt(tmp_path, _loader(batch_size=8), "data.cursor_resume=strict")
    with pytest.raises(ResumeError, match=r"batch_size 4 -> 8"):
        strict.resume()
    strict.close()


def test_a_changed_distributed_sampler_seed_is_a_geometry_change(tmp_path: Path) -> None:
    def sampled(seed: int) -> Any:
        sampler = torch.utils.data.DistributedSampler(
            list(range(32)), num_replicas=1, rank=0, seed=seed
        )
        return _loader(sampler=sampler)

    loader = sampled(7)
    ckpt = _ckpt(tmp_path, loader)
    ckpt.resume()
    _consume(ckpt, iter(loader), 2)
    ckpt.close()
    again = _ckpt(tmp_path, sampled(8))
    result = again.resume()
    again.close()
    assert result.data == "geometry_changed"
    assert any("seed 7 -> 8" in note for note in result.notes), result.notes
