"""The direct root (statecraft.checkpoint.direct.root) and the direct manifest
(statecraft.checkpoint.direct.manifest): URI parsing, the default prefix, opening against the
real S3 server with wrong credentials / unknown bucket / endpoint down (nothing written), and
the manifest's encode/decode with its JSON schema enforced on read."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
from s3_server import BUCKET, S3Server, free_ports

from statecraft.checkpoint.config.schema import CheckpointStoreConfig
from statecraft.checkpoint.direct import manifest as manifest_module
from statecraft.checkpoint.direct import root as root_module
from statecraft.checkpoint.direct.manifest import (
    DirectManifest,
    decode_direct_manifest,
    generation_dir,
    manifest_path,
    new_generation_id,
)
from statecraft.checkpoint.direct.root import DirectRoot, open_direct_root, parse_direct_uri
from statecraft.checkpoint.kernel.layout import RunAttempt, RunIdentity
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    ConfigError,
    CredentialsError,
    ObjectRequestError,
)
from statecraft.storage.base import FileRecord
from statecraft.storage.digest import Digest
from statecraft.storage.objects import SimBucket
from statecraft.storage.s3 import RetryPolicy

RUN_TS = "20261202050000"
FAST = {"retry": RetryPolicy(attempts=1), "connect_timeout_s": 1.0, "read_timeout_s": 2.0}


def _attempt(tmp_path: Path) -> RunAttempt:
    run_dir = tmp_path / "out" / "proj" / "grp" / "demo" / RUN_TS
    return RunAttempt(run_dir, RUN_TS, False, True, "test")


def _keys(server: S3Server) -> list[str]:
    listing = server.client().list_objects_v2(Bucket=BUCKET)
    return sorted(o["Key"] for o in listing.get("Contents", []))


class TestParse:
    def test_doctests(self) -> None:
        assert doctest.testmod(root_module).failed == 0

    @pytest.mark.parametrize(
        ("uri", "expected"),
        [
            ("s3://ckpt-bucket/a/b/checkpoints", ("ckpt-bucket", "a/b/checkpoints", None)),
            ("s3://ckpt-bucket/a/iter_000000004", ("ckpt-bucket", "a", 4)),
            ("s3://ckpt-bucket/a/iter_000000004/", ("ckpt-bucket", "a", 4)),
            ("s3://ckpt-bucket/iter_000000004", ("ckpt-bucket", "", 4)),
            ("s3://ckpt-bucket", ("ckpt-bucket", "", None)),
        ],
    )
    def test_parse(self, uri: str, expected: tuple[str, str, int | None]) -> None:
        assert parse_direct_uri(uri) == expected

    @pytest.mark.parametrize(
        "uri",
        [
            "/local/path",
            "s3://Bad_Bucket/x",
            "s3://ckpt-bucket/a/iter_12",
            "s3://ckpt-bucket/a/../b",
        ],
    )
    def test_bad(self, uri: str) -> None:
        with pytest.raises(ConfigError):
            parse_direct_uri(uri)


class TestOpenSim:
    def test_default_prefix_mirrors_local_layout(self, tmp_path: Path) -> None:
        config = CheckpointStoreConfig(backend="object_store", bucket="sim-bucket")
        root = open_direct_root(config, _attempt(tmp_path), bucket=SimBucket())
        assert root.prefix == f"proj/grp/demo/{RUN_TS}/checkpoints"
        assert root.uri == f"s3://sim-bucket/proj/grp/demo/{RUN_TS}/checkpoints"
        assert root.iteration_uri(4) == f"{root.uri}/iter_000000004"
        explicit = open_direct_root(
            CheckpointStoreConfig(backend="object_store", bucket="sim-bucket", prefix="/x/y/"),
            _attempt(tmp_path),
            bucket=SimBucket(),
            run=RunIdentity("p", "g", "n"),
        )
        assert explicit.prefix == "x/y"

    def test_knobs_required(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError) as exc:
            open_direct_root(CheckpointStoreConfig(backend="object_store"), _attempt(tmp_path))
        assert "checkpoint_store.bucket" in str(exc.value)
        # an empty checkpoint_store.credentials is boto3's default chain, not an issue
        assert "checkpoint_store.credentials" not in str(exc.value)
        with pytest.raises(ConfigError, match=r"checkpoint_store\.prefix"):
            open_direct_root(
                CheckpointStoreConfig(backend="object_store", bucket="sim-bucket", prefix="a//b"),
                _attempt(tmp_path),
                bucket=SimBucket(),
            )

    def test_missing_credentials_file(self, tmp_path: Path) -> None:
        config = CheckpointStoreConfig(
            backend="object_store", bucket="ckpt-bucket", credentials=str(tmp_path / "nope.json")
        )
        with pytest.raises(CredentialsError, match=r"checkpoint_store\.credentials"):
            open_direct_root(config, _attempt(tmp_path))


class TestOpenS3:
    def test_opens_and_writes_nothing(self, s3_server: S3Server, tmp_path: Path) -> None:
        before = _keys(s3_server)
        config = CheckpointStoreConfig(
            backend="object_store",
            bucket=BUCKET,
            credentials=str(s3_server.credentials_file),
            prefix="direct-root-test/checkpoints",
        )
        root = open_direct_root(config, _attempt(tmp_path), **FAST)
        assert isinstance(root, DirectRoot)
        assert root.uri == f"s3://{BUCKET}/direct-root-test/checkpoints"
        assert root.store.list() == []
        assert _keys(s3_server) == before

    @pytest.mark.parametrize("case", ["wrong-secret", "unknown-bucket", "endpoint-down"])
    def test_refusals(self, case: str, s3_server: S3Server, tmp_path: Path) -> None:
        before = _keys(s3_server)
        bucket = BUCKET
        if case == "wrong-secret":
            creds = s3_server.write_credentials(tmp_path / "c.json", secret="not-the-secret-0123")
        elif case == "unknown-bucket":
            creds, bucket = s3_server.credentials_file, "no-such-bucket-here"
        else:
            (port,) = free_ports(1)
            creds = s3_server.write_credentials(
                tmp_path / "c.json", endpoint_url=f"http://127.0.0.1:{port}"
            )
        config = CheckpointStoreConfig(
            backend="object_store", bucket=bucket, credentials=str(creds)
        )
        with pytest.raises(ObjectRequestError) as exc:
            open_direct_root(config, _attempt(tmp_path), **FAST)
        message = str(exc.value)
        assert f"s3://{bucket}" in message
        assert "checkpoint_store.bucket" in message
        assert "nothing was written" in message
        assert str(creds) in message
        assert s3_server.secret_key not in message
        assert _keys(s3_server) == before


def _manifest(**extra: object) -> DirectManifest:
    gen = "g0001733115600000-0a1b2c3d"
    record = FileRecord("trainer.pt", 12, Digest.of(b"x" * 12))
    fields: dict = {
        "control_generation": gen,
        "control": {"trainer.pt": record},
        "plan": ("model", "optimizer", "training_state"),
        "writer": {"host": "n1", "pid": "7"},
        "lease_generation": 2,
    }
    fields.update(extra)
    return DirectManifest.build(100, **fields)  # type: ignore[arg-type]


class TestManifest:
    def test_round_trip(self) -> None:
        manifest = _manifest()
        data = manifest.encode()
        assert decode_direct_manifest(data, source="m", iteration=100) == manifest
        raw = json.loads(data)
        assert raw["schema"] == "statecraft.direct-manifest.v1"
        assert raw["components"] == {"model": "model", "optim": "optim"}
        assert raw["format"] == "dcp"
        assert "s3://" not in data.decode()
        assert manifest.control_path("trainer.pt") == (
            "iter_000000100/.posttrain/generations/g0001733115600000-0a1b2c3d/trainer.pt"
        )
        assert manifest.component_path("optim") == "iter_000000100/optim"

    def test_layout_helpers(self) -> None:
        assert generation_dir(4, "abc") == "iter_000000004/.posttrain/generations/abc"
        assert manifest_path(4) == "iter_000000004/.posttrain-manifest.json"
        first, second = new_generation_id(lambda: 1.0), new_generation_id(lambda: 2.0)
        assert first < second
        for bad in ("", "..", "a/b", ".hidden", "-x"):
            with pytest.raises(ValueError, match="plain path segment"):
                generation_dir(4, bad)

    def test_same_commit(self) -> None:
        a = _manifest()
        b = _manifest(writer={"host": "other"}, lease_generation=3, control_generation="g2")
        assert a.same_commit(b) == []
        c = _manifest(plan=("model",))
        assert a.same_commit(c) != []

    @pytest.mark.parametrize(
        ("edit", "match"),
        [
            (lambda r: r.update(components={"model": "../elsewhere"}), "violates"),
            (lambda r: r.update(components={"model": "s3://b/x"}), "violates"),
            (lambda r: r.update(control_generation="a/b"), "violates"),
            (lambda r: r.update(extra=1), "violates"),
            (lambda r: r.pop("control"), "violates"),
            (lambda r: r.update(format="consolidated"), "violates"),
            (lambda r: r["control"]["trainer.pt"].update(size=-1), "violates"),
            (lambda r: r.update(schema="statecraft.checkpoint-manifest.v2"), "is not a"),
            (lambda r: r.update(iteration=5), "names iteration 5"),
        ],
    )
    def test_refused_on_read(self, edit, match: str) -> None:
        raw = json.loads(_manifest().encode())
        edit(raw)
        with pytest.raises(CheckpointCorruptError, match=match):
            decode_direct_manifest(json.dumps(raw).encode(), source="m", iteration=100)

    def test_not_json(self) -> None:
        with pytest.raises(CheckpointCorruptError, match="not JSON"):
            decode_direct_manifest(b"{", source="m")

    def test_bad_record_not_written(self) -> None:
        with pytest.raises(ValueError, match="plain path segment"):
            _manifest(control={"../x": FileRecord("x", 1, Digest.of(b"x"))})
        bad = DirectManifest(
            "statecraft.direct-manifest.v1", 1, "dcp", {}, "g", {}, ("model",), {}, 1
        )
        with pytest.raises(CheckpointError, match="refusing to write"):
            bad.encode()

    def test_module_doc_names_the_schema(self) -> None:
        assert "statecraft.direct-manifest.v1" in (manifest_module.__doc__ or "")
