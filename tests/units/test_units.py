"""Committed units on the real filesystem: seal (payloads or a framework's files), verify,
adopt the newest, prune (symlinks included), slots of generations, and bad input."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from statecraft.checkpoint.units import (
    UNIT_MANIFEST_NAME,
    generation_units,
    newest_committed,
    newest_generation,
    prune_slot,
    prune_unit,
    require_committed,
    seal_generation,
    seal_unit,
    verify_unit,
)
from statecraft.errors import (
    StoreError,
    UnitCommittedError,
    UnitDamagedError,
    UnitError,
    UnitNotCommittedError,
)
from statecraft.storage.local import LocalStore


def _framework_folder(root: Path, name: str, step: int) -> None:
    folder = root / name
    (folder / "rng").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 100 + bytes([step]))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "rng" / "rng_state.pth").write_bytes(b"r" * 7)


def _payload(data: bytes):
    return {"checkpoint.pt": lambda f: f.write(data)}


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path)


class TestSealAndVerify:
    def test_adopted_folder_commits_every_file(self, store: LocalStore, tmp_path: Path) -> None:
        _framework_folder(tmp_path, "checkpoint-4", 4)
        assert verify_unit(store, "checkpoint-4").state == "uncommitted"
        report = seal_unit(store, "checkpoint-4", framework="hf-trainer", step=4,
                           meta={"epoch": 1.5}, expect=["trainer_state.json"])  # fmt: skip
        assert sorted(report.manifest.files) == [
            "model.safetensors", "rng/rng_state.pth", "trainer_state.json",
        ]  # fmt: skip
        assert report.bytes == 101 + len('{"global_step": 4}') + 7
        raw = json.loads((tmp_path / "checkpoint-4" / UNIT_MANIFEST_NAME).read_text())
        assert raw["schema"] == "statecraft.unit-commit.v1"
        assert raw["step"] == 4
        assert raw["meta"] == {"epoch": 1.5}
        verdict = verify_unit(store, "checkpoint-4")
        assert verdict.committed, verdict.reason
        assert verdict.step == 4

    @pytest.mark.parametrize(
        ("damage", "reason"),
        [
            (lambda f: (f / "model.safetensors").write_bytes(b"w" * 101), "digest"),
            (lambda f: (f / "model.safetensors").write_bytes(b"w"), "holds 1 bytes"),
            (lambda f: (f / "rng" / "rng_state.pth").unlink(), "missing"),
            (lambda f: (f / "extra.bin").write_bytes(b"x"), "does not name"),
            (lambda f: (f / UNIT_MANIFEST_NAME).write_text("{"), "not valid JSON"),
            (lambda f: (f / UNIT_MANIFEST_NAME).write_text('{"schema": "x"}'), "schema"),
        ],
    )
    def test_damage_is_a_verdict_with_its_reason(
        self, store: LocalStore, tmp_path: Path, damage, reason: str
    ) -> None:
        _framework_folder(tmp_path, "checkpoint-4", 4)
        seal_unit(store, "checkpoint-4", framework="hf-trainer", step=4)
        damage(tmp_path / "checkpoint-4")
        verdict = verify_unit(store, "checkpoint-4")
        assert verdict.state == "damaged"
        assert reason in verdict.reason
        with pytest.raises(UnitDamagedError, match="never loaded"):
            require_committed(store, "checkpoint-4")

    def test_shallow_verification_checks_sizes_only(self, store: LocalStore, tmp_path) -> None:
        _framework_folder(tmp_path, "checkpoint-4", 4)
        seal_unit(store, "checkpoint-4", framework="hf-trainer", step=4)
        (tmp_path / "checkpoint-4" / "model.safetensors").write_bytes(b"z" * 101)
        assert verify_unit(store, "checkpoint-4", deep=False).committed
        assert not verify_unit(store, "checkpoint-4").committed

    def test_a_committed_unit_is_never_sealed_again(self, store: LocalStore, tmp_path) -> None:
        _framework_folder(tmp_path, "checkpoint-4", 4)
        seal_unit(store, "checkpoint-4", framework="hf-trainer", step=4)
        before = (tmp_path / "checkpoint-4" / UNIT_MANIFEST_NAME).read_bytes()
        with pytest.raises(UnitCommittedError, match="committed already"):
            seal_unit(store, "checkpoint-4", framework="hf-trainer", payloads=_payload(b"x"))
        assert (tmp_path / "checkpoint-4" / UNIT_MANIFEST_NAME).read_bytes() == before
        assert (tmp_path / "checkpoint-4" / "model.safetensors").read_bytes()[:1] == b"w"

    def test_missing_expected_file_commits_nothing(self, store: LocalStore, tmp_path) -> None:
        _framework_folder(tmp_path, "checkpoint-4", 4)
        (tmp_path / "checkpoint-4" / "trainer_state.json").unlink()
        with pytest.raises(UnitError, match=r"missing \['trainer_state.json'\]"):
            seal_unit(store, "checkpoint-4", framework="hf-trainer", expect=["trainer_state.json"])
        assert not (tmp_path / "checkpoint-4" / UNIT_MANIFEST_NAME).exists()

    def test_empty_folder_commits_nothing(self, store: LocalStore, tmp_path: Path) -> None:
        (tmp_path / "checkpoint-4").mkdir()
        with pytest.raises(UnitError, match="holds no file"):
            seal_unit(store, "checkpoint-4", framework="hf-trainer")

    @pytest.mark.parametrize("name", [UNIT_MANIFEST_NAME, "../escape", "/abs"])
    def test_bad_names_are_refused_before_any_write(self, store: LocalStore, name) -> None:
        with pytest.raises((UnitError, StoreError)):
            seal_unit(store, "u", framework="x", payloads={name: lambda f: None})
        assert store.stat("u") is None

    def test_a_failing_payload_publishes_nothing(self, store: LocalStore) -> None:
        def explode(f) -> None:
            f.write(b"half")
            raise RuntimeError("serializer failed")

        with pytest.raises(RuntimeError, match="serializer failed"):
            seal_unit(store, "u", framework="x", payloads={"checkpoint.pt": explode})
        assert verify_unit(store, "u").state == "uncommitted"
        assert store.list("u") == []


class TestAdoptNewest:
    def test_newer_uncommitted_and_damaged_are_passed_over_and_logged(
        self, store: LocalStore, tmp_path: Path, caplog
    ) -> None:
        for step in (2, 4, 6):
            _framework_folder(tmp_path, f"checkpoint-{step}", step)
        seal_unit(store, "checkpoint-2", framework="hf-trainer", step=2)
        seal_unit(store, "checkpoint-4", framework="hf-trainer", step=4)
        (tmp_path / "checkpoint-4" / "model.safetensors").write_bytes(b"torn")
        log = logging.getLogger("test.units")
        with caplog.at_level(logging.WARNING, "test.units"):
            chosen, passed = newest_committed(
                store, ["checkpoint-6", "checkpoint-4", "checkpoint-2"], log=log
            )
        assert chosen is not None
        assert chosen.unit == "checkpoint-2"
        assert [(v.unit, v.state) for v in passed] == [
            ("checkpoint-6", "uncommitted"), ("checkpoint-4", "damaged"),
        ]  # fmt: skip
        assert "checkpoint-6: uncommitted (no commit manifest" in caplog.text
        assert "checkpoint-4: damaged" in caplog.text

    def test_none_committed(self, store: LocalStore, tmp_path: Path) -> None:
        _framework_folder(tmp_path, "checkpoint-2", 2)
        assert newest_committed(store, ["checkpoint-2", "checkpoint-9"])[0] is None
        with pytest.raises(UnitNotCommittedError, match="uncommitted"):
            require_committed(store, "checkpoint-2")
        with pytest.raises(UnitNotCommittedError, match="absent"):
            require_committed(store, "checkpoint-9")


class TestPrune:
    def test_prune_removes_the_manifest_first_then_everything(self, store, tmp_path) -> None:
        _framework_folder(tmp_path, "checkpoint-2", 2)
        seal_unit(store, "checkpoint-2", framework="hf-trainer", step=2)
        prune_unit(store, "checkpoint-2")
        assert not (tmp_path / "checkpoint-2").exists()
        prune_unit(store, "checkpoint-2")  # absent is fine

    def test_prune_of_a_symlink_never_touches_its_target(self, store, tmp_path) -> None:
        _framework_folder(tmp_path, "checkpoint-2", 2)
        seal_unit(store, "checkpoint-2", framework="hf-trainer", step=2)
        os.symlink(tmp_path / "checkpoint-2", tmp_path / "last")
        prune_unit(store, "last")
        prune_slot(store, "last")
        assert not (tmp_path / "last").exists()
        assert verify_unit(store, "checkpoint-2").committed
        os.symlink(tmp_path / "checkpoint-2", tmp_path / "last2")
        prune_slot(store, "last2")
        assert verify_unit(store, "checkpoint-2").committed


class TestGenerations:
    def test_each_save_seals_the_next_generation_then_retires_the_older(self, store) -> None:
        first = seal_generation(store, "last.ckpt", framework="lightning", step=1,
                                payloads=_payload(b"one"))  # fmt: skip
        assert first.unit == "last.ckpt/g00000001"
        second = seal_generation(store, "last.ckpt", framework="lightning", step=2,
                                 payloads=_payload(b"two"))  # fmt: skip
        assert second.unit == "last.ckpt/g00000002"
        assert second.retired == ("last.ckpt/g00000001",)
        assert generation_units(store, "last.ckpt") == ["last.ckpt/g00000002"]
        chosen, passed = newest_generation(store, "last.ckpt")
        assert chosen is not None
        assert (chosen.unit, passed) == ("last.ckpt/g00000002", [])
        assert store.read_bytes("last.ckpt/g00000002/checkpoint.pt") == b"two"

    def test_a_crashed_generation_is_never_reused_and_is_retired(self, store) -> None:
        seal_generation(store, "last.ckpt", framework="lightning", payloads=_payload(b"one"))
        store.make_dirs("last.ckpt/g00000002")
        store.write_atomic("last.ckpt/g00000002/checkpoint.pt", b"torn")  # no manifest
        chosen, passed = newest_generation(store, "last.ckpt")
        assert chosen is not None
        assert chosen.unit == "last.ckpt/g00000001"
        assert [v.state for v in passed] == ["uncommitted"]
        third = seal_generation(store, "last.ckpt", framework="lightning", payloads=_payload(b"3"))
        assert third.unit == "last.ckpt/g00000003"
        assert generation_units(store, "last.ckpt") == ["last.ckpt/g00000003"]

    def test_prune_slot_removes_every_generation(self, store, tmp_path: Path) -> None:
        seal_generation(store, "epoch=0.ckpt", framework="lightning", payloads=_payload(b"1"))
        prune_slot(store, "epoch=0.ckpt")
        assert not (tmp_path / "epoch=0.ckpt").exists()
        prune_slot(store, "epoch=0.ckpt")


class TestSealRefusesWhatItCannotCommit:
    def test_retiring_the_unit_itself_is_refused_before_any_write(self, store) -> None:
        with pytest.raises(UnitError, match="cannot retire 'slot/g1'"):
            seal_unit(store, "slot/g1", framework="x", payloads=_payload(b"1"), retire=["slot/g1"])
        with pytest.raises(UnitError, match="inside it"):
            seal_unit(store, "slot", framework="x", payloads=_payload(b"1"), retire=["slot/g1"])
        assert store.stat("slot") is None

    def test_a_file_appearing_while_sealing_commits_nothing(self, store, tmp_path) -> None:
        """Another process writing into the folder between the inventory and the commit:
        the commit is refused and the unit stays uncommitted (the production effects, in
        table order, over the real filesystem)."""
        from statecraft.checkpoint.units import seal_bindings as effects
        _framework_folder(tmp_path, "checkpoint-4", 4)
        ctx = effects.UnitSealContext(store, "checkpoint-4", "hf-trainer", 4)
        effects.adopt_files(ctx)
        (tmp_path / "checkpoint-4" / "late.bin").write_bytes(b"late")
        effects.make_files_durable(ctx)
        with pytest.raises(UnitError, match="files changed while it was being sealed"):
            effects.commit_manifest(ctx)
        assert verify_unit(store, "checkpoint-4").state == "uncommitted"
        assert (tmp_path / "checkpoint-4" / "late.bin").read_bytes() == b"late"
