"""Tests of statecraft.storage.digest: the digest scheme, its stream hasher, verification of a
stored file through mmap and through ``Store.open_read``, and manifests that record it (v2)
or predate it (v1, SHA-256)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xxhash

import statecraft as sc
from statecraft.checkpoint.kernel.manifest import (
    MANIFEST_SCHEMA,
    MANIFEST_SCHEMA_V1,
    FileEntry,
    Manifest,
    decode_manifest,
)
from statecraft.checkpoint.resume.bindings import verify_checkpoint
from statecraft.errors import CheckpointCorruptError, StoreError
from statecraft.storage import LocalStore, SimWorld
from statecraft.storage import digest as digest_module
from statecraft.storage.digest import (
    ALGORITHMS,
    SAVE_ALGORITHM,
    Digest,
    StreamDigest,
    file_digest,
    file_digests,
    new_hasher,
)

SPECS = Path(__file__).resolve().parents[2] / "specs"


def xxh3(data: bytes) -> Digest:
    """The xxh3_128 digest of ``data``, computed here with ``xxhash`` itself."""
    return Digest("xxh3_128", xxhash.xxh3_128_hexdigest(data))


def sha256(data: bytes) -> Digest:
    return Digest("sha256", hashlib.sha256(data).hexdigest())


class NoLocalPath:
    """A store view without a local path, so digests go through ``open_read``."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store

    def local_path(self, path: str) -> None:
        return None

    def open_read(self, path: str) -> Any:
        return self._store.open_read(path)


@pytest.fixture(params=["mmap", "open_read", "sim"])
def stores(request, tmp_path: Path) -> tuple[Any, Any]:
    """(a store to write with, the same files as the digest functions see them)."""
    if request.param == "sim":
        store = SimWorld().local_store("/ckpt")
        return store, store
    store = LocalStore(tmp_path / "store")
    return store, store if request.param == "mmap" else NoLocalPath(store)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Chunks of 4 KiB, so a few KiB exercise the multi-chunk and read-ahead paths."""
    monkeypatch.setattr(digest_module, "CHUNK_BYTES", 4096)
    return 4096


class TestDigest:
    def test_scheme_constants(self) -> None:
        """Saves record xxh3_128; sha256 stays known (v1 manifests, archive inventories)."""
        assert SAVE_ALGORITHM == "xxh3_128"
        assert ALGORITHMS == {"sha256": 64, "xxh3_128": 32}

    def test_of_matches_the_reference_libraries(self) -> None:
        """``Digest.of`` equals hashlib's SHA-256 and xxhash's xxh3_128 of the same bytes."""
        data = os.urandom(3000)
        assert Digest.of(data) == xxh3(data)
        assert Digest.of(data, "sha256") == sha256(data)
        assert str(Digest.of(b"", "sha256")) == "sha256:" + hashlib.sha256(b"").hexdigest()

    def test_unknown_algorithm_is_refused(self) -> None:
        """An unknown algorithm names itself, the known ones and the fix."""
        with pytest.raises(StoreError, match=r"'md5' is not known; expected one of \['sha256'"):
            Digest("md5", "00")
        with pytest.raises(StoreError, match="Upgrade statecraft"):
            new_hasher("blake2b")

    @pytest.mark.parametrize(
        ("digest", "ok"),
        [
            (Digest("xxh3_128", "0" * 32), True),
            (Digest("xxh3_128", "0" * 64), False),
            (Digest("sha256", "a" * 64), True),
            (Digest("sha256", "A" * 64), False),
            (Digest("sha256", "g" * 64), False),
        ],
    )
    def test_well_formed(self, digest: Digest, ok: bool) -> None:
        """A value is well formed when it is lowercase hex of the algorithm's length."""
        assert digest.well_formed() is ok


class TestStreamDigest:
    def test_chunks_of_any_size_equal_one_shot(self) -> None:
        """Small (inline) and large (helper-thread) chunks in any mix hash like one buffer."""
        data = os.urandom(5 << 20)
        stream = StreamDigest(("xxh3_128", "sha256"))
        for start, end in [(0, 10), (10, 3 << 20), (3 << 20, (3 << 20) + 1), ((3 << 20) + 1, None)]:
            stream.start(memoryview(data)[start:end])
        assert stream.digests() == {"xxh3_128": xxh3(data), "sha256": sha256(data)}
        assert stream.digest() == xxh3(data)

    def test_needs_an_algorithm(self) -> None:
        """An empty algorithm list is refused at construction."""
        with pytest.raises(StoreError, match="at least one algorithm"):
            StreamDigest(())


class TestFileDigest:
    @pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 17, 40 * 4096])
    def test_matches_the_bytes(self, stores, small_chunks, size: int) -> None:
        """Every path (mmap with read-ahead, open_read, simulated store) digests the bytes,
        for empty, single-chunk, chunk-aligned and multi-chunk files."""
        store, view = stores
        data = os.urandom(size)
        record = store.write_atomic("f", data)
        assert record.digest == xxh3(data)
        assert file_digest(view, "f") == xxh3(data)
        assert file_digests(view, "f", ("sha256", "xxh3_128")) == {
            "sha256": sha256(data),
            "xxh3_128": xxh3(data),
        }

    @pytest.mark.parametrize("where", ["first", "middle", "last chunk start", "last"])
    def test_detects_a_flipped_byte(self, stores, small_chunks, where: str) -> None:
        """A single flipped bit anywhere, including in the last partial chunk, changes it."""
        store, view = stores
        data = bytearray(os.urandom(5 * 4096 + 100))
        original = store.write_atomic("f", bytes(data)).digest
        offset = {"first": 0, "middle": 2 * 4096 + 7, "last chunk start": 5 * 4096, "last": -1}
        data[offset[where]] ^= 0x01
        store.write_atomic("f", bytes(data))
        assert file_digest(view, "f") != original
        assert file_digest(view, "f") == xxh3(bytes(data))

    def test_detects_truncation(self, stores, small_chunks) -> None:
        """A file missing its last byte (or its last chunk) has another digest."""
        store, view = stores
        data = os.urandom(3 * 4096)
        original = store.write_atomic("f", data).digest
        for cut in (1, 4096):
            store.write_atomic("f", data[:-cut])
            assert file_digest(view, "f") != original

    def test_real_chunk_size_with_read_ahead(self, tmp_path: Path) -> None:
        """At the real 16 MiB chunk size, a 40 MiB file (read-ahead helper running) digests
        right through mmap."""
        store = LocalStore(tmp_path)
        data = os.urandom(40 << 20)
        store.write_atomic("big", data)
        assert file_digest(store, "big") == xxh3(data)
        assert file_digest(store, "big", "sha256") == sha256(data)

    def test_missing_file(self, stores) -> None:
        """A missing file raises the store's own FileNotFoundError."""
        _, view = stores
        with pytest.raises(FileNotFoundError):
            file_digest(view, "nope")


def _manifest(schema: str, digest: Digest) -> Manifest:
    return Manifest(
        schema,
        100,
        "consolidated",
        ("model", "optimizer", "training_state"),
        {"model.pt": FileEntry(10, digest), "trainer.pt": FileEntry(3, digest)},
        {"statecraft": "0.1.0"},
    )


class TestManifestScheme:
    def test_v2_records_the_algorithm(self) -> None:
        """A v2 manifest stores ``{"algorithm", "value"}`` per file and round-trips."""
        manifest = _manifest(MANIFEST_SCHEMA, Digest("xxh3_128", "ab" * 16))
        raw = json.loads(manifest.encode())
        assert raw["schema"] == "statecraft.checkpoint-manifest.v2"
        assert raw["files"]["model.pt"] == {
            "size": 10,
            "digest": {"algorithm": "xxh3_128", "value": "ab" * 16},
        }
        assert decode_manifest(manifest.encode(), source="m") == manifest

    def test_v1_reads_as_sha256_and_keeps_its_shape(self) -> None:
        """A v1 manifest's ``sha256`` becomes a sha256 Digest; encoding keeps the v1 bytes."""
        v1 = {
            "schema": MANIFEST_SCHEMA_V1,
            "iteration": 100,
            "format": "consolidated",
            "components": ["model", "optimizer", "training_state"],
            "files": {"model.pt": {"size": 10, "sha256": "cd" * 32}},
            "writer": {"statecraft": "0.1.0"},
        }
        data = (json.dumps(v1, sort_keys=True, indent=1) + "\n").encode()
        manifest = decode_manifest(data, source="m")
        assert manifest.files["model.pt"] == FileEntry(10, Digest("sha256", "cd" * 32))
        assert manifest.encode() == data

    @pytest.mark.parametrize(
        ("files", "message"),
        [
            ({"model.pt": {"size": 1, "sha256": "xyz"}}, "model.pt: digest 'xyz'"),
            (
                {"model.pt": {"size": 1, "digest": {"algorithm": "xxh3_128", "value": "0" * 32}}},
                "model.pt: digest '" + "0" * 32 + "'",
            ),
        ],
    )
    def test_v1_digests_must_be_sha256(self, files: dict, message: str) -> None:
        """A v1 manifest holds SHA-256 values only; anything else is refused, named."""
        raw = json.loads(_manifest(MANIFEST_SCHEMA_V1, Digest("sha256", "ab" * 32)).encode())
        raw["files"] = files
        with pytest.raises(CheckpointCorruptError, match=message):
            decode_manifest(json.dumps(raw).encode(), source="m")

    def test_json_schema_accepts_both_versions(self) -> None:
        """``specs/save.manifest.schema.json`` accepts what v2 writes and what v1 wrote, and
        refuses a v2 entry in the v1 shape."""
        schema = json.loads((SPECS / "save.manifest.schema.json").read_text())
        validator = jsonschema.Draft202012Validator(schema)
        v2 = json.loads(_manifest(MANIFEST_SCHEMA, Digest("xxh3_128", "ab" * 16)).encode())
        v1 = json.loads(_manifest(MANIFEST_SCHEMA_V1, Digest("sha256", "ab" * 32)).encode())
        assert list(validator.iter_errors(v2)) == []
        assert list(validator.iter_errors(v1)) == []
        v2["files"]["model.pt"] = v1["files"]["model.pt"]
        assert list(validator.iter_errors(v2)) != []


class TestVerifyCheckpoint:
    @pytest.fixture
    def saved(self, tmp_path: Path) -> LocalStore:
        """One committed full checkpoint (iteration 1) of a tiny model."""
        import torch

        model = torch.nn.Linear(4, 4)
        ckpt = sc.Checkpointer(
            sc.CheckpointConfig.from_dict({"resume": "off", "save_every": 0}),
            run=sc.RunIdentity("p", "g", "n"),
            output_root=str(tmp_path),
        )
        ckpt.track(model=model, optimizer=torch.optim.AdamW(model.parameters()))
        ckpt.record(sc.Outcome.APPLIED)
        report = ckpt.save()
        assert report is not None
        ckpt.close()  # joins the background write (save_async=true): iteration 1 is durable
        return LocalStore(str(Path(report.location).parent))

    def _as_v1(self, store: LocalStore) -> None:
        path = Path(store.root) / "iter_000000001" / ".posttrain-manifest.json"
        raw = json.loads(path.read_bytes())
        raw["schema"] = MANIFEST_SCHEMA_V1
        for name, entry in raw["files"].items():
            data = (Path(store.root) / "iter_000000001" / name).read_bytes()
            raw["files"][name] = {"size": entry["size"], "sha256": hashlib.sha256(data).hexdigest()}
        path.write_text(json.dumps(raw, sort_keys=True, indent=1) + "\n")

    def test_v2_checkpoint_verifies(self, saved: LocalStore) -> None:
        """A fresh save records xxh3_128 for every file and verifies."""
        verified = verify_checkpoint(saved, 1)
        assert {e.digest.algorithm for e in verified.manifest.files.values()} == {"xxh3_128"}

    def test_v1_checkpoint_still_verifies(self, saved: LocalStore) -> None:
        """A checkpoint whose manifest is v1 (SHA-256 per file) still verifies."""
        self._as_v1(saved)
        verified = verify_checkpoint(saved, 1)
        assert verified.manifest.schema == MANIFEST_SCHEMA_V1

    @pytest.mark.parametrize("schema", ["v1", "v2"])
    def test_flipped_byte_is_refused(self, saved: LocalStore, schema: str) -> None:
        """A same-size flip in model.pt fails verification, naming the algorithm it used."""
        if schema == "v1":
            self._as_v1(saved)
        path = Path(saved.root) / "iter_000000001" / "model.pt"
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
        algorithm = "sha256" if schema == "v1" else "xxh3_128"
        with pytest.raises(CheckpointCorruptError, match=f"model.pt: digest {algorithm} "):
            verify_checkpoint(saved, 1)
