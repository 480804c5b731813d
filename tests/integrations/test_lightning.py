"""StatecraftCheckpointIO in one process: save / load / remove round trips, what a load passes
over and why, symlinks, the asynchronous write slot, and the helpers for paths Lightning does
not route through CheckpointIO."""

from __future__ import annotations

import functools
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("pytorch_lightning")

from statecraft.checkpoint.units import (
    UNIT_MANIFEST_NAME,
    generation_units,
    seal_unit,
    verify_unit,
)
from statecraft.errors import UnitError, UnitNotCommittedError
from statecraft.integrations.lightning import (
    CHECKPOINT_FILE,
    SLOTS_DIR,
    StatecraftCheckpointIO,
    committed_checkpoint_file,
    last_committed_checkpoint,
)
from statecraft.storage.local import LocalStore

LOG = "statecraft.lightning"


def _slots(directory: Path) -> LocalStore:
    """The store of the slots of the checkpoints in ``directory`` (``.statecraft/``)."""
    return LocalStore(str(directory / SLOTS_DIR))


def _slot(path: Path) -> Path:
    """The slot directory of checkpoint ``path``."""
    return path.parent / SLOTS_DIR / path.name


def _checkpoint(step: int, fill: float = 0.0) -> dict[str, Any]:
    """A Lightning-shaped checkpoint dict of a tiny model and its optimizer."""
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.fill_(fill)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return {
        "epoch": step // 10,
        "global_step": step,
        "pytorch-lightning_version": "2.6.6",
        "state_dict": model.state_dict(),
        "optimizer_states": [optimizer.state_dict()],
    }


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _save_into(obj: Any, writer: Any) -> None:
    torch.save(obj, writer)


class _Gate:
    """Pickled inside torch.save: blocks the write until released (or raises)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def __deepcopy__(self, memo: dict[int, Any]) -> _Gate:
        twin = _Gate.__new__(_Gate)  # the staged copy shares the events
        twin.__dict__.update(self.__dict__)
        return twin

    def __reduce__(self) -> tuple[Any, ...]:
        self.entered.set()
        if self.fail:
            raise OSError("injected write failure")
        if not self.release.wait(20):
            raise TimeoutError("gate never released")
        return (int, (0,))


class TestSaveLoad:
    def test_round_trip_keeps_only_the_newest_generation(self, tmp_path: Path) -> None:
        """Each save of last.ckpt commits a new generation and retires the older one; a load
        returns the newest, bit-exact, and its manifest records Lightning's step."""
        io = StatecraftCheckpointIO()
        path = tmp_path / "last.ckpt"
        io.save_checkpoint(_checkpoint(10, 1.0), path)
        second = _checkpoint(20, 2.0)
        io.save_checkpoint(second, path)
        store = _slots(tmp_path)
        assert generation_units(store, "last.ckpt") == ["last.ckpt/g00000002"]
        verdict = verify_unit(store, "last.ckpt/g00000002")
        assert verdict.committed
        assert verdict.manifest is not None
        assert verdict.manifest.step == 20
        assert verdict.manifest.framework == "lightning"
        assert verdict.manifest.meta["epoch"] == 2
        assert set(verdict.manifest.files) >= {CHECKPOINT_FILE}
        assert _equal(io.load_checkpoint(path, weights_only=True), second)

    def test_failed_save_leaves_previous_generation_loadable(self, tmp_path: Path) -> None:
        """A save that fails inside torch.save raises, and the committed generation it was
        to replace still loads."""
        io = StatecraftCheckpointIO()
        path = tmp_path / "last.ckpt"
        first = _checkpoint(10, 1.0)
        io.save_checkpoint(first, path)
        with pytest.raises(OSError, match="injected"):
            io.save_checkpoint({**_checkpoint(20), "gate": _Gate(fail=True)}, path)
        assert _equal(io.load_checkpoint(path, weights_only=True), first)

    def test_partial_newest_generation_is_skipped_with_reason(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A generation without a commit manifest (a save killed mid-write) is passed over
        with a WARNING naming it; the older committed generation is loaded."""
        io = StatecraftCheckpointIO()
        path = tmp_path / "last.ckpt"
        first = _checkpoint(10, 1.0)
        io.save_checkpoint(first, path)
        partial = _slot(path) / "g00000002"
        partial.mkdir()
        (partial / CHECKPOINT_FILE).write_bytes(b"PK\x03\x04 torn")
        with caplog.at_level(logging.WARNING, logger=LOG):
            assert _equal(io.load_checkpoint(path, weights_only=True), first)
        assert "g00000002" in caplog.text
        assert "uncommitted" in caplog.text

    def test_damaged_generation_is_skipped_with_reason(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A committed generation whose file no longer matches its digest is never loaded;
        the load logs why and takes the next generation that verifies."""
        store = LocalStore(str(tmp_path))
        first, second = _checkpoint(10, 1.0), _checkpoint(20, 2.0)
        for unit, obj in (("last.ckpt/g00000001", first), ("last.ckpt/g00000002", second)):
            seal_unit(
                store,
                unit,
                framework="lightning",
                step=obj["global_step"],
                payloads={CHECKPOINT_FILE: functools.partial(_save_into, obj)},
            )
        damaged = tmp_path / "last.ckpt" / "g00000002" / CHECKPOINT_FILE
        raw = bytearray(damaged.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        damaged.write_bytes(bytes(raw))
        with caplog.at_level(logging.WARNING, logger=LOG):
            loaded = StatecraftCheckpointIO().load_checkpoint(tmp_path / "last.ckpt")
        assert _equal(loaded, first)
        assert "g00000002" in caplog.text
        assert "damaged" in caplog.text

    def test_no_committed_generation_is_an_error_naming_what_was_found(
        self, tmp_path: Path
    ) -> None:
        """A slot holding only an uncommitted generation raises UnitNotCommittedError (a
        FileNotFoundError) naming the path and the generation's state."""
        (tmp_path / "last.ckpt" / "g00000001").mkdir(parents=True)
        with pytest.raises(UnitNotCommittedError, match="uncommitted") as info:
            StatecraftCheckpointIO().load_checkpoint(tmp_path / "last.ckpt")
        assert str(tmp_path / "last.ckpt") in str(info.value)
        assert isinstance(info.value, FileNotFoundError)
        with pytest.raises(UnitNotCommittedError, match="nothing exists"):
            StatecraftCheckpointIO().load_checkpoint(tmp_path / "absent.ckpt")

    def test_automatic_paths_fall_back_to_the_newest_committed_sibling(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A SLURM requeue resumes from the highest hpc_ckpt_N, and ckpt_path="last" from
        last.ckpt: when a killed save left that path without a commit, the load takes the
        newest sibling that verifies (logged), never the torn one; a path the user named
        (epoch=...) still fails closed."""
        io = StatecraftCheckpointIO()
        io.save_checkpoint(_checkpoint(10, fill=1.0), tmp_path / "hpc_ckpt_1.ckpt")
        io.save_checkpoint(_checkpoint(20, fill=2.0), tmp_path / "epoch=1-step=20.ckpt")
        for torn in ("hpc_ckpt_2.ckpt", "last.ckpt", "epoch=2-step=30.ckpt"):
            (_slot(tmp_path / torn) / "g00000001").mkdir(parents=True)
            (_slot(tmp_path / torn) / "g00000001" / CHECKPOINT_FILE).write_bytes(b"torn")
        with caplog.at_level(logging.WARNING, LOG):
            hpc = io.load_checkpoint(tmp_path / "hpc_ckpt_2.ckpt")
            last = io.load_checkpoint(tmp_path / "last.ckpt")
        assert hpc["global_step"] == 10
        assert last["global_step"] == 20
        assert f"loading {tmp_path / 'hpc_ckpt_1.ckpt'} instead" in caplog.text
        assert f"loading {tmp_path / 'epoch=1-step=20.ckpt'} instead" in caplog.text
        with pytest.raises(UnitNotCommittedError, match="uncommitted"):
            io.load_checkpoint(tmp_path / "epoch=2-step=30.ckpt")
        (_slot(tmp_path / "hpc_ckpt_1.ckpt") / "g00000001" / CHECKPOINT_FILE).write_bytes(b"x")
        with pytest.raises(UnitNotCommittedError, match="hpc_ckpt_2"):
            io.load_checkpoint(tmp_path / "hpc_ckpt_2.ckpt")  # no sibling verifies

    def test_plain_file_is_refused_unless_allowed(self, tmp_path: Path) -> None:
        """A checkpoint file TorchCheckpointIO wrote is refused with a message saying so; with
        allow_unverified=True it loads (a warning says it was not verified)."""
        plain = tmp_path / "epoch=0-step=1.ckpt"
        obj = _checkpoint(1, 3.0)
        torch.save(obj, plain)
        with pytest.raises(UnitNotCommittedError, match=r"plain file.*TorchCheckpointIO"):
            StatecraftCheckpointIO().load_checkpoint(plain)
        loaded = StatecraftCheckpointIO(allow_unverified=True).load_checkpoint(plain)
        assert _equal(loaded, obj)
        with pytest.raises(UnitError, match="plain file"):
            StatecraftCheckpointIO().save_checkpoint(obj, plain)  # never written over
        assert _equal(torch.load(plain), obj)

    def test_url_and_storage_options_are_refused(self, tmp_path: Path) -> None:
        """Object-store URLs and storage_options raise before anything is written."""
        with pytest.raises(UnitError, match="URL"):
            StatecraftCheckpointIO().save_checkpoint(_checkpoint(1), "s3://bucket/last.ckpt")
        with pytest.raises(TypeError, match="storage_options"):
            StatecraftCheckpointIO().save_checkpoint(
                _checkpoint(1), tmp_path / "x.ckpt", storage_options={"a": 1}
            )
        assert not (tmp_path / "x.ckpt").exists()


class TestRemove:
    def test_remove_invalidates_then_deletes(self, tmp_path: Path) -> None:
        """remove_checkpoint prunes every generation and the slot directory."""
        io = StatecraftCheckpointIO()
        path = tmp_path / "epoch=0-step=1.ckpt"
        io.save_checkpoint(_checkpoint(1), path)
        io.remove_checkpoint(path)
        assert not path.exists()
        io.remove_checkpoint(path)  # absent is fine

    def test_symlink_remove_unlinks_only_the_link(self, tmp_path: Path) -> None:
        """A save_last="link" symlink loads through to its target; removing it unlinks the
        link and leaves the target committed."""
        io = StatecraftCheckpointIO()
        target = tmp_path / "epoch=0-step=1.ckpt"
        obj = _checkpoint(1, 5.0)
        io.save_checkpoint(obj, target)
        link = tmp_path / "last.ckpt"
        os.symlink(target.name, link)
        assert _equal(io.load_checkpoint(link, weights_only=True), obj)
        assert committed_checkpoint_file(link).startswith(str(_slot(target)))
        io.remove_checkpoint(link)
        assert not os.path.lexists(link)
        assert verify_unit(_slots(tmp_path), f"{target.name}/g00000001").committed
        assert _equal(torch.load(target, weights_only=True), obj)


class TestAsync:
    def test_save_returns_while_the_write_runs_and_writes_the_snapshot(
        self, tmp_path: Path
    ) -> None:
        """An async save returns with torch.save still blocked; the tensors changed after it
        returned do not reach the file; teardown joins the write."""
        io = StatecraftCheckpointIO(async_save=True)
        gate = _Gate()
        obj = _checkpoint(10, 1.0)
        expected = {k: v for k, v in obj.items()}
        expected_weight = obj["state_dict"]["weight"].clone()
        io.save_checkpoint({**obj, "gate": gate}, tmp_path / "last.ckpt")
        assert gate.entered.wait(10), "the background write never started"
        assert io.last_blocking_seconds is not None
        obj["state_dict"]["weight"].add_(100.0)  # training goes on
        assert not (_slot(tmp_path / "last.ckpt") / "g00000001" / UNIT_MANIFEST_NAME).exists()
        assert not os.path.lexists(tmp_path / "last.ckpt")  # never visible before the commit
        gate.release.set()
        io.teardown()
        loaded = io.load_checkpoint(tmp_path / "last.ckpt", weights_only=False)
        assert torch.equal(loaded["state_dict"]["weight"], expected_weight)
        assert loaded["global_step"] == expected["global_step"]
        assert io.last_report is not None
        assert io.last_report.unit == "last.ckpt/g00000001"

    @pytest.mark.parametrize("collector", ["save", "teardown"])
    def test_write_error_surfaces_once(self, tmp_path: Path, collector: str) -> None:
        """A background write's error is raised by the next save (or teardown), once; the
        checkpoint it was writing never commits."""
        io = StatecraftCheckpointIO(async_save=True)
        io.save_checkpoint({**_checkpoint(1), "gate": _Gate(fail=True)}, tmp_path / "a.ckpt")
        collect = (
            (lambda: io.save_checkpoint(_checkpoint(2), tmp_path / "b.ckpt"))
            if collector == "save"
            else io.teardown
        )
        with pytest.raises(OSError, match="injected") as info:
            collect()
        assert any("a.ckpt" in note for note in getattr(info.value, "__notes__", ()))
        io.teardown()  # delivered once
        with pytest.raises(UnitNotCommittedError):
            io.load_checkpoint(tmp_path / "a.ckpt")

    def test_remove_waits_for_the_write_in_flight(self, tmp_path: Path) -> None:
        """Top-k pruning during an async write keeps the previous checkpoint until the new
        one committed."""
        io = StatecraftCheckpointIO(async_save=True)
        old, new = tmp_path / "epoch=0-step=1.ckpt", tmp_path / "epoch=1-step=2.ckpt"
        io.save_checkpoint(_checkpoint(1), old)
        io.teardown()
        gate = _Gate()
        io.save_checkpoint({**_checkpoint(2), "gate": gate}, new)
        assert gate.entered.wait(10)
        io.remove_checkpoint(old)
        assert verify_unit(_slots(tmp_path), f"{old.name}/g00000001").committed
        assert os.path.isfile(old)
        gate.release.set()
        io.teardown()
        assert not os.path.lexists(old)
        assert not _slot(old).exists()
        assert verify_unit(_slots(tmp_path), f"{new.name}/g00000001").committed


class TestResolve:
    def test_last_committed_checkpoint_picks_the_highest_step_that_verifies(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The slot with the highest committed step wins; a newer slot holding only a
        partial generation is passed over with a WARNING; links are not candidates."""
        io = StatecraftCheckpointIO()
        io.save_checkpoint(_checkpoint(10), tmp_path / "epoch=0-step=10.ckpt")
        io.save_checkpoint(_checkpoint(20), tmp_path / "epoch=1-step=20.ckpt")
        io.save_checkpoint(_checkpoint(5), tmp_path / "last.ckpt")
        (_slot(tmp_path / "epoch=2-step=30.ckpt") / "g00000001").mkdir(parents=True)
        os.symlink("epoch=0-step=10.ckpt", tmp_path / "link.ckpt")
        with caplog.at_level(logging.WARNING, logger=LOG):
            chosen = last_committed_checkpoint(tmp_path)
        assert chosen == str(tmp_path / "epoch=1-step=20.ckpt")
        assert "epoch=2-step=30.ckpt" in caplog.text
        assert last_committed_checkpoint(tmp_path / "nothing") is None

    def test_load_from_checkpoint_and_torch_load_open_the_familiar_path(
        self, tmp_path: Path
    ) -> None:
        """LightningModule.load_from_checkpoint and torch.load bypass CheckpointIO: given the
        path Lightning saved to they load it unchanged (a link to the committed payload), and
        committed_checkpoint_file names that same committed file."""
        from lightning_runs import build_module

        module = build_module()
        io = StatecraftCheckpointIO()
        path = tmp_path / "epoch=0-step=1.ckpt"
        io.save_checkpoint(
            {
                "state_dict": module.state_dict(),
                "pytorch-lightning_version": "2.6.6",
                "global_step": 1,
                "epoch": 0,
            },
            path,
        )
        cls = type(module)
        loaded = cls.load_from_checkpoint(str(path))
        assert _equal(loaded.state_dict(), module.state_dict())
        assert _equal(torch.load(path, weights_only=True)["state_dict"], module.state_dict())
        assert os.path.isfile(path)
        assert committed_checkpoint_file(path) == os.path.realpath(path)


class _Reenter:
    """Copied by the async snapshot: saves another checkpoint through the same IO from
    inside the save, as Lightning's SIGUSR1 handler does when the signal lands mid-save.
    The IO and path are class attributes (set per test), so the live checkpoint does not
    reach the IO's staging buffers."""

    io: StatecraftCheckpointIO
    path: Path

    def __deepcopy__(self, memo: dict[int, Any]) -> int:
        self.io.save_checkpoint(_checkpoint(7, 7.0), self.path)
        return 0


class TestReentry:
    def test_save_reentered_from_a_signal_handler_is_written_synchronously(
        self, tmp_path: Path
    ) -> None:
        """A save entered while another save is on the stack (a signal handler) commits
        before it returns, and the interrupted async save still commits its own state."""
        io = StatecraftCheckpointIO(async_save=True)
        hpc = tmp_path / "hpc_ckpt_1.ckpt"
        outer = _checkpoint(10, 1.0)
        reenter = type("Reenter", (_Reenter,), {"io": io, "path": hpc})()
        io.save_checkpoint({**outer, "reenter": reenter}, tmp_path / "last.ckpt")
        assert verify_unit(_slots(tmp_path), "hpc_ckpt_1.ckpt/g00000001").committed
        io.teardown()
        loaded = io.load_checkpoint(tmp_path / "last.ckpt", weights_only=True)
        assert _equal(loaded["state_dict"], outer["state_dict"])
        assert io.load_checkpoint(hpc, weights_only=True)["global_step"] == 7


@pytest.mark.usefixtures("torch_determinism_restored")
class TestTrainer:
    def _fit(
        self, root: Path, epochs: int, *, async_save: bool, save_last: Any = True, **kw: Any
    ) -> tuple[Any, Any]:
        import pytorch_lightning as pl
        from lightning_runs import build_module, build_trainer

        pl.seed_everything(0, verbose=False)
        module = build_module()
        trainer = build_trainer(
            str(root), epochs, io="statecraft", async_save=async_save, save_last=save_last
        )
        trainer.fit(module, **kw)
        return module, trainer

    def test_async_fit_then_resume_matches_an_uninterrupted_sync_fit(self, tmp_path: Path) -> None:
        """Two epochs with async saves, then fit(ckpt_path="last") to three, ends with the
        model and optimizer of an uninterrupted synchronous three-epoch fit, bit for bit."""
        from lightning_runs import final_state

        ref_module, ref_trainer = self._fit(tmp_path / "ref", 3, async_save=False)
        self._fit(tmp_path / "run", 2, async_save=True)
        module, trainer = self._fit(tmp_path / "run", 3, async_save=True, ckpt_path="last")
        got, want = final_state(module, trainer), final_state(ref_module, ref_trainer)
        assert got["global_step"] == want["global_step"]
        assert _equal(got["model"], want["model"])
        assert _equal(got["optimizer"], want["optimizer"])

    def test_save_last_link_resumes_through_the_link(self, tmp_path: Path) -> None:
        """With save_last="link" last.ckpt is a symlink to the newest top-k slot; pruning the
        older top-k slot leaves the link's target, and fit(ckpt_path="last") resumes
        through it."""
        self._fit(tmp_path, 2, async_save=False, save_last="link")
        ckpts = tmp_path / "ckpts"
        assert os.path.islink(ckpts / "last.ckpt")
        assert sorted(p.name for p in ckpts.iterdir()) == [
            SLOTS_DIR,
            "epoch=1-step=8.ckpt",
            "last.ckpt",
        ]
        assert sorted(p.name for p in (ckpts / SLOTS_DIR).iterdir()) == ["epoch=1-step=8.ckpt"]
        _, trainer = self._fit(tmp_path, 3, async_save=True, save_last="link", ckpt_path="last")
        assert trainer.global_step == 12
        assert os.readlink(ckpts / "last.ckpt") == "epoch=2-step=12.ckpt"

    def test_a_failed_final_async_write_is_raised_by_fit(self, tmp_path: Path) -> None:
        """The last checkpoint's background write fails after fit's loop ended: teardown
        joins it and trainer.fit raises its error."""
        import pytorch_lightning as pl

        class FailLast(pl.Callback):
            def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: Any) -> None:
                if checkpoint["epoch"] == 1:
                    checkpoint["gate"] = _Gate(fail=True)

        from lightning_runs import build_module, build_trainer

        trainer = build_trainer(str(tmp_path), 2, io="statecraft", async_save=True)
        trainer.callbacks.append(FailLast())
        with pytest.raises(OSError, match="injected"):
            trainer.fit(build_module())
