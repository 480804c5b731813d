"""The digests a seal takes of a framework's files (statecraft/checkpoint/units/adopt_digests.py):
read once each on a thread pool, the same records a sequential read through the store gives."""

from __future__ import annotations

import os

import pytest

from statecraft.checkpoint.units import seal_unit, verify_unit
from statecraft.checkpoint.units.adopt_digests import adopted_records, start_writeback
from statecraft.errors import SpecialFileError
from statecraft.storage.digest import file_digest
from statecraft.storage.local import LocalStore
from statecraft.storage.sim import SimWorld

# an empty file, small ones, and one that spans two of the hasher's 16 MiB chunks
SIZES = {"empty.bin": 0, "a.json": 17, "b.pt": 70_000, "big.safetensors": (16 << 20) + 4097}


def _write_folder(root: str, unit: str) -> dict[str, bytes]:
    contents = {name: os.urandom(size) for name, size in SIZES.items()}
    os.makedirs(os.path.join(root, unit))
    for name, data in contents.items():
        with open(os.path.join(root, unit, name), "wb") as handle:  # no fsync, like a Trainer
            handle.write(data)
    return contents


class TestAdoptedRecords:
    def test_pool_records_match_a_sequential_read(self, tmp_path):
        """Every file's size and digest from the pool equal the store's own sequential digest."""
        store = LocalStore(str(tmp_path))
        contents = _write_folder(str(tmp_path), "checkpoint-2")
        records = adopted_records(store, "checkpoint-2", {n: len(d) for n, d in contents.items()})
        assert sorted(records) == sorted(SIZES)
        for name, data in contents.items():
            assert records[name].size == len(data)
            assert records[name].digest == file_digest(store, f"checkpoint-2/{name}")

    def test_sim_store_is_read_through_the_store(self):
        """A store with no local paths (the crash harness's) gets the same records, read
        sequentially through the store."""
        store = SimWorld().local_store("/ckpt")
        store.make_dirs("u")
        store.write_atomic("u/x.bin", b"abc" * 1000)
        records = adopted_records(store, "u", {"x.bin": 3000})
        assert records["x.bin"].size == 3000
        assert records["x.bin"].digest == file_digest(store, "u/x.bin")

    def test_a_file_swapped_for_a_symlink_is_refused(self, tmp_path):
        """A file that became a symlink after the caller's stat is never followed."""
        store = LocalStore(str(tmp_path))
        _write_folder(str(tmp_path), "u")
        os.remove(tmp_path / "u" / "a.json")
        os.symlink(tmp_path / "u" / "b.pt", tmp_path / "u" / "a.json")
        with pytest.raises(SpecialFileError):
            adopted_records(store, "u", {"a.json": 17, "b.pt": 70_000})

    def test_start_writeback_is_only_a_hint(self, tmp_path):
        """Starting the writeback of a file changes none of its bytes."""
        path = tmp_path / "f"
        path.write_bytes(b"x" * 10_000)
        fd = os.open(path, os.O_RDONLY)
        try:
            start_writeback(fd)
        finally:
            os.close(fd)
        assert path.read_bytes() == b"x" * 10_000


class TestSealedFolder:
    def test_sealed_folder_verifies_deeply(self, tmp_path):
        """A framework folder sealed through the pool verifies with every digest, and its
        manifest names every file with its size."""
        store = LocalStore(str(tmp_path))
        contents = _write_folder(str(tmp_path), "checkpoint-4")
        report = seal_unit(store, "checkpoint-4", framework="hf-trainer", step=4)
        assert {n: e.size for n, e in report.manifest.files.items()} == {
            n: len(d) for n, d in contents.items()
        }
        assert verify_unit(store, "checkpoint-4", deep=True).committed
