"""``statecraft.checkpoints``: a real run's committed checkpoints (durable validations record
their metrics), their step, state, metrics, size and path, ``latest()`` / ``best()``, and
``load_weights(which=...)`` loading the one they name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import statecraft as sc
from statecraft.errors import CheckpointError, CheckpointSourceError, ConfigError

RUN = sc.RunIdentity("proj", "group", "name")
VAL_LOSS = {2: 3.0, 4: 1.0, 6: 2.0}  # the best (lowest) is step 4, the highest step 2


def _train(out: Path, *knobs: str, validate: bool = True) -> dict[int, torch.Tensor]:
    """Six steps; with ``validate`` a durable validation at 2, 4 and 6 (its val_loss from
    :data:`VAL_LOSS`), else a save_every=2 cadence. Returns each step's weight."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cadence = ["validation.every=2", "validation.save_checkpoint=true"] if validate else []
    config = sc.CheckpointConfig.load(
        None, ["save_async=false", *(cadence or ["save_every=2"]), *knobs]
    )
    ckpt = sc.Checkpointer(config, run=RUN, output_root=out)
    ckpt.track(model=model, optimizer=optimizer)
    if validate:
        ckpt.validate_with(lambda step: {"val_loss": VAL_LOSS[step], "acc": step / 10})
    ckpt.resume()
    weights = {}
    for _ in range(6):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.record(sc.Outcome.APPLIED)
        ckpt.step_end()
        weights[ckpt.step] = model.weight.detach().clone()
    live = sc.checkpoints(ckpt)  # a live Checkpointer: its run dir
    assert live.steps == [6, 4, 2]
    ckpt.finalize()
    ckpt.close()
    return weights


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, torch.Tensor]]:
    out = tmp_path_factory.mktemp("validated")
    return out, _train(out)


def _payload_bytes(iter_dir: Path) -> int:
    """The bytes of the checkpoint's payload files on disk (not its markers or records)."""
    return sum(p.stat().st_size for p in iter_dir.rglob("*") if p.is_file() and p.name[0] != ".")


class TestListing:
    def test_every_committed_iteration_with_step_state_metrics_size_and_path(
        self, validated: tuple[Path, dict[int, torch.Tensor]]
    ) -> None:
        """The default keep_optim_last: the newest is whole and published, the older ones
        weights-only; each carries the metrics its validation recorded."""
        out, _ = validated
        listed = sc.checkpoints(out)
        assert listed.steps == [6, 4, 2]
        assert len(listed) == 3
        assert [i.state for i in listed] == ["published", "weights_only", "weights_only"]
        assert [i.resumable for i in listed] == [True, False, False]
        assert [i.metrics["val_loss"] for i in listed] == [2.0, 1.0, 3.0]
        attempt = next(p for p in RUN.job_dir(out).iterdir() if p.is_dir())
        for info in listed:
            assert info.path == attempt / "checkpoints" / f"iter_{info.step:09d}"
            assert info.attempt == attempt.name
            assert info.size_bytes == _payload_bytes(info.path) > 0
        whole, pruned = listed.step(6), listed.step(4)
        assert not (pruned.path / "optim.pt").exists()
        assert (whole.path / "optim.pt").exists()

    def test_every_source_kind_lists_the_same(
        self, validated: tuple[Path, dict[int, torch.Tensor]]
    ) -> None:
        out, _ = validated
        job = RUN.job_dir(out)
        attempt = next(p for p in job.iterdir() if p.is_dir())
        for source in (out, job, attempt, attempt / "checkpoints", str(job)):
            assert sc.checkpoints(source).steps == [6, 4, 2], source
        assert sc.checkpoints(out, verify="digest").steps == [6, 4, 2]

    def test_latest_and_best_by_a_metric(
        self, validated: tuple[Path, dict[int, torch.Tensor]]
    ) -> None:
        listed = sc.checkpoints(validated[0])
        latest, best = listed.latest(), listed.best("val_loss")
        assert latest is not None
        assert latest.step == 6
        assert best is not None
        assert best.step == 4
        assert best.metrics["val_loss"] == 1.0
        highest = listed.best("val_loss", mode="max")
        assert highest is not None
        assert highest.step == 2
        acc = listed.best("acc", "max")
        assert acc is not None
        assert acc.step == 6

    def test_a_misspelt_metric_or_mode_is_refused(
        self, validated: tuple[Path, dict[int, torch.Tensor]]
    ) -> None:
        listed = sc.checkpoints(validated[0])
        with pytest.raises(CheckpointError, match=r"'val_los'.*recorded: \['acc', 'val_loss'\]"):
            listed.best("val_los")
        with pytest.raises(ConfigError, match="mode"):
            listed.best("val_loss", mode="lowest")
        with pytest.raises(ConfigError, match="metric"):
            listed.best("")
        with pytest.raises(CheckpointError, match="no committed checkpoint of step 5"):
            listed.step(5)

    def test_partial_and_corrupt_directories_are_not_listed(self, tmp_path: Path) -> None:
        _train(tmp_path, validate=False)
        attempt = next(p for p in RUN.job_dir(tmp_path).iterdir() if p.is_dir())
        (attempt / "checkpoints" / "iter_000000008").mkdir()  # an interrupted save
        (attempt / "checkpoints" / "iter_000000006" / "model.pt").write_bytes(b"torn")
        listed = sc.checkpoints(tmp_path)
        assert listed.steps == [4, 2]
        assert listed.best("val_loss") is None  # nothing evaluated: no metric recorded

    def test_bad_sources_are_refused_with_the_fix(
        self, validated: tuple[Path, dict[int, torch.Tensor]], tmp_path: Path
    ) -> None:
        out, _ = validated
        with pytest.raises(CheckpointSourceError, match="no such directory"):
            sc.checkpoints(tmp_path / "missing")
        one = sc.checkpoints(out).step(4).path
        with pytest.raises(CheckpointSourceError, match="is one checkpoint"):
            sc.checkpoints(one)
        with pytest.raises(CheckpointSourceError, match="holds no run"):
            sc.checkpoints(tmp_path)
        with pytest.raises(ConfigError, match="verify"):
            sc.checkpoints(out, verify="md5")
        with pytest.raises(CheckpointSourceError, match="expected a path"):
            sc.checkpoints(42)  # type: ignore[arg-type]


class TestLoadWhich:
    def _model(self) -> torch.nn.Linear:
        torch.manual_seed(1)
        return torch.nn.Linear(4, 3)

    def test_best_loads_the_best_checkpoints_weights(
        self, validated: tuple[Path, dict[int, torch.Tensor]]
    ) -> None:
        out, weights = validated
        model = self._model()
        loaded = sc.load_weights(model, out, which="best:val_loss")
        assert loaded.iteration == 4
        assert torch.equal(model.weight, weights[4])
        assert sc.load_weights(model, out, which="best:val_loss:max").iteration == 2
        assert torch.equal(model.weight, weights[2])
        assert sc.load_weights(model, out, which=6).iteration == 6
        assert sc.load_weights(model, out).iteration == 6  # the default: latest
        assert torch.equal(model.weight, weights[6])

    def test_a_bad_selection_is_refused_before_anything_loads(
        self, validated: tuple[Path, dict[int, torch.Tensor]]
    ) -> None:
        out, _ = validated
        model = self._model()
        before = model.weight.detach().clone()
        for which in ("best", "best:val_loss:up", "newest", -1, True):
            with pytest.raises(ConfigError, match="which"):
                sc.load_weights(model, out, which=which)  # type: ignore[arg-type]
        with pytest.raises(CheckpointError, match="no committed checkpoint of step 3"):
            sc.load_weights(model, out, which=3)
        assert torch.equal(model.weight, before)
