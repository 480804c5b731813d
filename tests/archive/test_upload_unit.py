"""The upload transaction over a simulated disk and bucket (fast): refusals, the receipt's
JSON schema (specs/archive-marker.schema.json, enforced on write and read), open.py's knobs."""

from __future__ import annotations

import json
import logging

import attrs
import pytest

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.archive.marker import (
    MARKER_SCHEMA_FILE,
    DestinationRecord,
    UploadedMarker,
    decode_marker,
)
from statecraft.checkpoint.archive.open import upload_destination
from statecraft.checkpoint.archive.upload_bindings import upload_checkpoint
from statecraft.checkpoint.archive.upload_progress import UploadProgress
from statecraft.checkpoint.config import CheckpointConfig
from statecraft.checkpoint.kernel.layout import RunIdentity
from statecraft.engine import load_spec
from statecraft.errors import (
    CheckpointCorruptError,
    CheckpointError,
    ConfigError,
    UploadRefusedError,
)
from statecraft.proofs.archive.upload_scenarios import REMOTE_PREFIX
from statecraft.proofs.oracle import CHECKPOINTS_ROOT
from statecraft.proofs.save.scenarios import save_context, shipped_machine
from statecraft.proofs.validation.scenarios import save_evaluation_pending
from statecraft.resources import spec_path
from statecraft.storage import SimWorld

MARKER = UploadedMarker(
    kind="checkpoint",
    iteration=4,
    destination=DestinationRecord("h:1", "b", "p/iter_000000004"),
    files=(ArchiveEntry("model.pt", 3, None), ArchiveEntry("trainer.pt", 2, "ab" * 32)),
)


def _world(*iterations: int) -> SimWorld:
    world = SimWorld()
    store = world.local_store(CHECKPOINTS_ROOT)
    for n in iterations:
        shipped_machine("save").recover(save_context(store, n, with_data=False, salt=0))
    return world


def _upload(world: SimWorld, n: int, **kw):
    store = world.local_store(CHECKPOINTS_ROOT)
    return upload_checkpoint(store, n, ArchiveDestination(world.bucket, REMOTE_PREFIX), **kw)


class TestUploadCheckpoint:
    def test_an_upload_says_when_it_starts(self, caplog: pytest.LogCaptureFixture) -> None:
        """The start line (files, MiB, destination) comes before the closing one."""
        world = _world(2)
        with caplog.at_level(logging.INFO, logger="statecraft"):
            _upload(world, 2)
        lines = [r.getMessage() for r in caplog.records if r.name == "statecraft"]
        started = [i for i, line in enumerate(lines) if line.startswith("uploading ")]
        assert len(started) == 1, lines
        assert "iter_000000002 to " in lines[started[0]]
        assert " 4 file(s), " in lines[started[0]]

    def test_progress_lines_come_at_the_interval(self, caplog: pytest.LogCaptureFixture) -> None:
        """A progress line once interval_s passed since the last one, with the counts."""
        now = [0.0]
        progress = UploadProgress("iter_2 to s3://b/p", 3, 3 * 2**20, 10.0, lambda: now[0])
        with caplog.at_level(logging.INFO, logger="statecraft"):
            progress.start()
            now[0] = 4.0
            progress.advance(2**20)  # too soon: silent
            now[0] = 12.0
            progress.advance(2**20)
            now[0] = 13.0
            progress.advance(2**20)  # too soon after the last line
        lines = [r.getMessage() for r in caplog.records]
        assert lines == [
            "uploading iter_2 to s3://b/p: 3 file(s), 3.0 MiB",
            "uploading iter_2 to s3://b/p: 2/3 file(s), 2.0/3.0 MiB (0.2 MiB/s)",
        ]

    def test_upload_then_again_skips_everything(self) -> None:
        """A first upload PUTs every file; a second finds the receipt and PUTs nothing."""
        world = _world(2)
        first = _upload(world, 2)
        assert (first.files, first.uploaded, first.skipped) == (4, 4, 0)
        assert first.marker.destination.prefix == f"{REMOTE_PREFIX}/iter_000000002"
        again = _upload(world, 2)
        assert again.uploaded == 0
        assert again.marker == first.marker

    def test_absent_iteration_is_refused_before_any_request(self) -> None:
        """An iteration that is not committed is refused; the bucket is untouched."""
        world = _world(2)
        with pytest.raises(UploadRefusedError, match="absent"):
            _upload(world, 4)
        assert world.bucket.objects == {}

    def test_pending_validation_is_refused_unless_the_publication_asks(self) -> None:
        """An evaluation-pending checkpoint is refused; with pending_ok it is archived."""
        world = _world()
        store = world.local_store(CHECKPOINTS_ROOT)
        save_evaluation_pending(store, 4, salt=0, location=CHECKPOINTS_ROOT)
        with pytest.raises(UploadRefusedError, match="evaluation_pending"):
            _upload(world, 4)
        assert world.bucket.objects == {}
        assert _upload(world, 4, pending_ok=True).uploaded == 4


class TestMarkerSchema:
    def test_the_spec_names_the_schema(self) -> None:
        """specs/upload.toml's receipt entry names the schema the marker code enforces."""
        spec = load_spec(spec_path("upload"))
        (entry,) = [f for f in spec.files if f.name.endswith(".uploaded")]
        assert entry.schema_file == MARKER_SCHEMA_FILE
        assert entry.schema is not None

    def test_round_trip(self) -> None:
        """What the upload writes conforms and decodes back."""
        assert decode_marker(MARKER.encode(), source="m") == MARKER

    def test_encode_refuses_a_marker_the_schema_refuses(self) -> None:
        """A bug building a receipt with a bad digest fails before any byte is written."""
        bad = attrs.evolve(MARKER, files=(ArchiveEntry("model.pt", 3, "not-hex"),))
        with pytest.raises(CheckpointError, match=MARKER_SCHEMA_FILE):
            bad.encode()

    def test_decode_refuses_a_doctored_marker(self) -> None:
        """A receipt edited to break the schema (an unknown field) is malformed on read."""
        doc = json.loads(MARKER.encode())
        doc["secret"] = "x"
        with pytest.raises(CheckpointCorruptError):
            decode_marker(json.dumps(doc).encode(), source="m")


class TestUploadDestination:
    def test_off_is_none(self) -> None:
        """upload.enabled=false: no destination, nothing opened."""
        assert upload_destination(CheckpointConfig(), RunIdentity.named("r"), "") is None

    def test_empty_prefix_is_the_mirrored_default(self) -> None:
        """prefix "" -> <project>/<group>/<name>/<RUN_TS>/checkpoints."""
        cfg = CheckpointConfig.from_dict({"upload": {"enabled": True, "bucket": "b"}})
        dest = upload_destination(
            cfg, RunIdentity("p", "g", "n"), "20260101000000", bucket=SimWorld().bucket
        )
        assert dest is not None
        assert dest.prefix == "p/g/n/20260101000000/checkpoints"

    def test_missing_bucket_names_the_knob(self) -> None:
        """upload.enabled without upload.bucket names it."""
        cfg = CheckpointConfig.from_dict({"upload": {"enabled": True}})
        with pytest.raises(ConfigError, match=r"upload\.bucket"):
            upload_destination(cfg, RunIdentity.named("r"), "", bucket=SimWorld().bucket)
