"""``StoreStorageWriter`` / ``StoreStorageReader``: DCP over our stores, one process.

Round trips (local disk, the simulated bucket, torch's own reader on our files), the records
the writer returns, and bad input: a bit flip, a truncated shard, a missing shard, a missing
or garbled ``.metadata``, a directory that already holds a ``.metadata``."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader

from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.storage.base import Store
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import ObjectStore, SimBucket
from statecraft.writers.dcp_failures import unwrap_checkpoint_exception
from statecraft.writers.dcp_store_reader import StoreStorageReader
from statecraft.writers.dcp_store_writer import StoreStorageWriter

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    return {
        "model": model.state_dict(),
        "step": 7,
        "names": ["a", "b"],
        "view": torch.arange(100)[10:20],  # a view: only its 10 elements are saved
    }


def _zeros(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
        "step": 0,
        "names": [],
        "view": torch.zeros(10, dtype=torch.long),
    }


def _save(store: Store, path: str, state: dict[str, Any], files: int = 1) -> StoreStorageWriter:
    writer = StoreStorageWriter(store, path, files_per_rank=files)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=writer, no_dist=True)
    return writer


def _load(store: Store, path: str, target: dict[str, Any]) -> None:
    reader = StoreStorageReader(store, path)
    reader.read_metadata()  # DCP turns a failed metadata read into an AssertionError
    try:
        dcp.load(target, storage_reader=reader, no_dist=True)
    except BaseException as exc:  # DCP wraps failures in a BaseException
        raise unwrap_checkpoint_exception(exc) from None


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert (a["step"], a["names"]) == (b["step"], b["names"])
    assert torch.equal(a["view"], b["view"])


@pytest.fixture(params=["local", "bucket"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return LocalStore(str(tmp_path / "ckpt"))
    return ObjectStore(SimBucket(), prefix="ckpt")


def test_round_trip_and_records(store: Store) -> None:
    state = _state()
    writer = _save(store, "iter_000000001/model", state, files=3)
    names = sorted(p.rsplit("/", 1)[1] for p in writer.records)
    assert names == [".metadata", "__0_0.distcp", "__0_1.distcp", "__0_2.distcp"]
    for path, record in writer.records.items():
        stat = store.stat(path)
        assert stat is not None
        assert stat.size == record.size
    metadata = StoreStorageReader(store, "iter_000000001/model").read_metadata()
    view = [i for k, i in metadata.storage_data.items() if k.fqn == "view"]
    whole = io.BytesIO()
    torch.save(torch.arange(100), whole)
    assert view[0].length < len(whole.getvalue())  # the view's 10 elements, not its storage
    assert view[0].digest.startswith("xxh3_128:")
    target = _zeros(state)
    _load(store, "iter_000000001/model", target)
    _assert_same(state, target)


def test_torch_reader_reads_our_files(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "ckpt"))
    state = _state()
    _save(store, "m", state)
    target = _zeros(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=FileSystemReader(str(tmp_path / "ckpt/m")), no_dist=True)
    _assert_same(state, target)


def _shard(tmp_path: Path) -> Path:
    return tmp_path / "ckpt" / "m" / "__0_0.distcp"


def test_bit_flip_names_the_shard(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "ckpt"))
    _save(store, "m", _state())
    data = bytearray(_shard(tmp_path).read_bytes())
    data[len(data) // 2] ^= 0x01
    _shard(tmp_path).write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match=r"m/__0_0\.distcp: has other bytes"):
        _load(store, "m", _zeros(_state()))


def test_truncated_shard_names_the_shard(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "ckpt"))
    _save(store, "m", _state())
    data = _shard(tmp_path).read_bytes()
    _shard(tmp_path).write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointCorruptError, match=r"__0_0\.distcp: is truncated"):
        _load(store, "m", _zeros(_state()))


def test_missing_shard_names_it(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "ckpt"))
    _save(store, "m", _state())
    _shard(tmp_path).unlink()
    with pytest.raises(CheckpointCorruptError, match=r"__0_0\.distcp: is missing"):
        _load(store, "m", _zeros(_state()))


def test_missing_metadata_names_it(store: Store) -> None:
    _save(store, "m", _state())
    store.delete("m/.metadata")
    with pytest.raises(CheckpointCorruptError, match=r"m/\.metadata: is missing"):
        _load(store, "m", _zeros(_state()))


def test_garbled_metadata_names_it(store: Store) -> None:
    _save(store, "m", _state())
    store.write_atomic("m/.metadata", b"not a pickle")
    with pytest.raises(CheckpointCorruptError, match=r"\.metadata: does not unpickle"):
        _load(store, "m", _zeros(_state()))


def test_existing_metadata_is_never_overwritten(store: Store) -> None:
    _save(store, "m", _state())
    before = store.read_bytes("m/.metadata")
    with pytest.raises(BaseException) as caught:
        _save(store, "m", _state())
    inner = unwrap_checkpoint_exception(caught.value)
    assert isinstance(inner, CheckpointError)
    assert "never overwritten" in str(inner)
    assert store.read_bytes("m/.metadata") == before


def test_round_trip_over_the_real_s3_server(s3_server: Any) -> None:
    """Shards and .metadata PUT to SeaweedFS, items read back by ranged GETs (S3Bucket's
    get_range), digests checked; a replaced shard is caught naming it."""
    import uuid

    from s3_server import BUCKET

    from statecraft.storage.s3 import S3Bucket
    from statecraft.storage.s3_credentials import load_credentials

    bucket = S3Bucket(load_credentials(s3_server.credentials_file), BUCKET)
    ranged: list[tuple[str, int, int]] = []
    get_range = bucket.get_range

    def counting(key: str, start: int, length: int) -> bytes:
        ranged.append((key, start, length))
        return get_range(key, start, length)

    bucket.get_range = counting  # type: ignore[method-assign]
    store = ObjectStore(bucket, prefix=f"dcp-{uuid.uuid4().hex[:8]}", name=BUCKET)
    state = _state()
    writer = _save(store, "iter_000000001/model", state, files=2)
    assert sorted(p.rsplit("/", 1)[1] for p in writer.records) == [
        ".metadata",
        "__0_0.distcp",
        "__0_1.distcp",
    ]
    target = _zeros(state)
    _load(store, "iter_000000001/model", target)
    _assert_same(state, target)
    assert len(ranged) >= 6  # one ranged GET per item, never a whole shard
    shard = "iter_000000001/model/__0_0.distcp"
    data = bytearray(store.read_bytes(shard))
    data[-20] ^= 0x01
    store.write_atomic(shard, bytes(data))
    with pytest.raises(CheckpointCorruptError, match=r"__0_0\.distcp"):
        _load(store, "iter_000000001/model", _zeros(state))
