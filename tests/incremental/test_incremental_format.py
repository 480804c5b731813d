"""checkpoint_format=incremental end to end: a frozen base is stored once per attempt, a save
writes only what changed (an in-place update of a frozen tensor included, through the
version counter or behind it), resume and load_weights read the blobs back verified, and
the collection after retention removes only what no iteration references."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import statecraft as sc
from statecraft.checkpoint.incremental import referenced_blobs
from statecraft.cli import main
from statecraft.errors import CheckpointCorruptError, ConfigError, NotSupportedYetError
from statecraft.storage.local import LocalStore
from statecraft.writers.blobs import BLOB_DIR

RUN = sc.RunIdentity("proj", "group", "incremental")
CONFIG = ["save_every=1", "save_async=false", "checkpoint_format=incremental"]


class Adapted(torch.nn.Module):
    """A large frozen base (256 KiB per matrix: stored as blobs) and a small trainable head."""

    def __init__(self) -> None:
        super().__init__()
        self.base = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
        self.base.requires_grad_(False)
        self.head = torch.nn.Linear(256, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.base(x))


class Objects:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = Adapted()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=0.01)

    def step(self) -> None:
        self.model(torch.randn(2, 256)).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


def _open(out: Path, *overrides: str) -> tuple[sc.Checkpointer, Objects]:
    objects = Objects()
    ckpt = sc.Checkpointer(
        sc.CheckpointConfig.load(None, [*CONFIG, *overrides]), run=RUN, output_root=out
    )
    ckpt.track(model=objects.model, optimizer=objects.optimizer)
    return ckpt, objects


def _train(ckpt: sc.Checkpointer, objects: Objects, steps: int, between=None) -> list:
    reports = []
    for _ in range(steps):
        objects.step()
        if between is not None:
            between(objects)
        ckpt.record(sc.Outcome.APPLIED)
        reports.append(ckpt.step_end())
    return reports


def _store(out: Path) -> LocalStore:
    (checkpoints,) = out.glob("*/*/*/*/checkpoints")
    return LocalStore(str(checkpoints))


def _blob_bytes(store: LocalStore) -> dict[str, int]:
    return {n: store.stat(f"{BLOB_DIR}/{n}").size for n in store.list(BLOB_DIR)}


def test_a_frozen_base_is_written_once_and_resume_restores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, objects = _open(tmp_path, "keep_optim_last=0")
    ckpt.resume()
    (end,) = _train(ckpt, objects, 1)
    store = _store(tmp_path)
    first = _blob_bytes(store)
    assert sum(first.values()) == 2 * 256 * 256 * 4  # the two base matrices, nothing else
    assert end.saved.bytes_written > sum(first.values())  # the report counts the blobs
    ends = _train(ckpt, objects, 3)
    assert _blob_bytes(store) == first  # unchanged base: no new blob
    assert all(e.saved.bytes_written < 256 * 256 * 4 for e in ends)
    refs = referenced_blobs(store)
    assert [it.iteration for it in refs.iterations] == [1, 2, 3, 4]
    shared, own = refs.shared_and_own(4)
    assert (shared, own) == (sum(first.values()), 0)
    expected = {k: v.clone() for k, v in objects.model.state_dict().items()}
    ckpt.close()
    assert main(["inspect", str(tmp_path / "proj/group/incremental")]) == 0
    shown = capsys.readouterr().out
    assert (
        "blobs: 2 referenced, 512.0 KiB (524288 B) shared with other iterations, 0 B its own"
        in shown
    )

    again, fresh = _open(tmp_path)
    result = again.resume()
    assert result.step == 4
    for key, value in fresh.model.state_dict().items():
        assert torch.equal(value, expected[key]), key
    again.close()
    evaluated = Adapted()
    sc.load_weights(evaluated, _store(tmp_path).root.rsplit("/", 1)[0])
    for key, value in evaluated.state_dict().items():
        assert torch.equal(value, expected[key]), key


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda o: o.model.base[0].weight.add_(1), id="no_grad-add_"),
        pytest.param(
            lambda o: o.model.base[0].weight.data.copy_(torch.ones(256, 256)), id="data-copy_"
        ),
    ],
)
def test_an_in_place_update_of_a_frozen_tensor_is_saved(tmp_path: Path, mutate) -> None:
    ckpt, objects = _open(tmp_path)
    ckpt.resume()
    _train(ckpt, objects, 1)
    store = _store(tmp_path)
    before = _blob_bytes(store)
    with torch.no_grad():
        mutate(objects)
    _train(ckpt, objects, 1)
    after = _blob_bytes(store)
    assert len(after) == len(before) + 1  # the mutated matrix's new bytes, once
    expected = objects.model.base[0].weight.detach().clone()
    ckpt.close()
    again, fresh = _open(tmp_path)
    assert again.resume().step == 2
    assert torch.equal(fresh.model.base[0].weight, expected)
    again.close()


def test_pytorch_data_writes_bypass_the_version_counter() -> None:
    """Why the unchanged-check is the digest, not ``_version``: a write through ``.data``
    leaves the parameter's version counter as it was (if torch changes this, the cheap check
    may be reconsidered)."""
    p = torch.nn.Parameter(torch.zeros(4))
    before = p._version
    p.data.copy_(torch.ones(4))
    assert p._version == before


def test_retention_prunes_and_the_collection_keeps_shared_blobs(tmp_path: Path) -> None:
    ckpt, objects = _open(tmp_path, "keep_optim_last=1", "keep_model_last=2")

    def bump(o: Objects) -> None:
        with torch.no_grad():
            o.model.base[1].weight.add_(1)

    ckpt.resume()
    _train(ckpt, objects, 5, between=bump)
    store = _store(tmp_path)
    refs = referenced_blobs(store)
    kept = [it.iteration for it in refs.iterations]
    assert kept == [4, 5]
    # base[0] is shared by every iteration ever saved; base[1] differs at each
    assert set(_blob_bytes(store)) == refs.live
    assert len(refs.live) == 3
    ckpt.close()
    again, _fresh = _open(tmp_path)
    assert again.resume().step == 5
    again.close()


def test_a_missing_blob_is_refused_and_resume_takes_the_previous(tmp_path: Path) -> None:
    ckpt, objects = _open(tmp_path, "keep_optim_last=0")
    ckpt.resume()
    _train(ckpt, objects, 1)
    store = _store(tmp_path)
    first = set(_blob_bytes(store))
    with torch.no_grad():
        objects.model.base[0].weight.mul_(2)
    _train(ckpt, objects, 1)
    (new,) = set(_blob_bytes(store)) - first
    ckpt.close()
    Path(store.local_path(f"{BLOB_DIR}/{new}")).unlink()
    with pytest.raises(CheckpointCorruptError, match="missing"):
        sc.load_weights(Adapted(), f"{store.root}/iter_000000002")
    again, _ = _open(tmp_path, "keep_optim_last=0")
    assert again.resume().step == 1
    again.close()


@pytest.mark.parametrize(
    ("overrides", "knob"),
    [
        (["upload.enabled=true", "upload.bucket=b"], "upload.enabled"),
        (["validation.save_checkpoint=true", "validation.every=2"], "validation.save_checkpoint"),
    ],
)
def test_unsupported_combinations_are_refused_at_config_time(overrides, knob) -> None:
    with pytest.raises(ConfigError, match=knob.replace(".", r"\.")):
        sc.CheckpointConfig.load(None, [*CONFIG, *overrides])


def test_roles_are_refused(tmp_path: Path) -> None:
    ckpt = sc.Checkpointer(sc.CheckpointConfig.load(None, CONFIG), run=RUN, output_root=tmp_path)
    objects = Objects()
    with pytest.raises(NotSupportedYetError, match="checkpoint_format"):
        ckpt.track_role("actor", model=objects.model, optimizer=objects.optimizer)


def test_a_damaged_blob_of_the_same_size_is_refused(tmp_path: Path) -> None:
    """The mapped read (load_weights maps model.pt's blobs) still hashes every byte."""
    ckpt, objects = _open(tmp_path)
    ckpt.resume()
    _train(ckpt, objects, 1)
    ckpt.close()
    store = _store(tmp_path)
    name = sorted(_blob_bytes(store))[0]
    path = Path(store.local_path(f"{BLOB_DIR}/{name}"))
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="does not hash to its name"):
        sc.load_weights(Adapted(), f"{store.root}/iter_000000001")
