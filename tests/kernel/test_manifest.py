"""The manifest record: canonical encoding and strict decoding."""

from __future__ import annotations

import json

import pytest

from statecraft.checkpoint.kernel.manifest import (
    MANIFEST_SCHEMA,
    FileEntry,
    Manifest,
    SavePlan,
    decode_manifest,
)
from statecraft.errors import CheckpointCorruptError
from statecraft.storage.digest import Digest

DIGEST = Digest("xxh3_128", "ab" * 16)
MANIFEST = Manifest(
    MANIFEST_SCHEMA,
    100,
    "consolidated",
    ("model", "optimizer", "training_state"),
    {"model.pt": FileEntry(10, DIGEST), "trainer.pt": FileEntry(3, DIGEST)},
    {"statecraft": "0.1.0"},
)


class TestManifest:
    def test_round_trip_and_canonical_bytes(self) -> None:
        """Encoding is canonical (sorted keys) and decodes to an equal record."""
        data = MANIFEST.encode()
        assert decode_manifest(data, source="m") == MANIFEST
        assert data == decode_manifest(data, source="m").encode()
        assert json.loads(data)["schema"] == "statecraft.checkpoint-manifest.v2"

    def test_plan_and_differences(self) -> None:
        """The plan lists files sorted; differences name each changed field."""
        plan = MANIFEST.plan
        assert plan.files == ("model.pt", "trainer.pt")
        other = SavePlan(100, "consolidated", plan.components, ("data.pt", *plan.files))
        assert other.differences(plan) == [
            "files: committed ('model.pt', 'trainer.pt'), now ('data.pt', 'model.pt', 'trainer.pt')"
        ]

    @pytest.mark.parametrize(
        ("mutate", "message"),
        [
            (lambda d: d.update(schema="other.v9"), "schema is 'other.v9'"),
            (lambda d: d.update(iteration="100"), "expected int @ $.iteration"),
            (lambda d: d.update(extra=1), "extra"),
            (lambda d: d["files"]["model.pt"].update(size=-1), "model.pt: size -1"),
            (
                lambda d: d["files"]["model.pt"]["digest"].update(value="xyz"),
                "model.pt: digest 'xyz'",
            ),
            (
                lambda d: d["files"]["model.pt"]["digest"].update(algorithm="md5"),
                "model.pt: digest algorithm 'md5' (known: ['sha256', 'xxh3_128'])",
            ),
            (lambda d: d.update(files={}), "0 files"),
        ],
    )
    def test_malformed_manifests_are_corrupt(self, mutate, message) -> None:
        """Each malformed field is refused with the source, the problem and what to do."""
        data = json.loads(MANIFEST.encode())
        mutate(data)
        with pytest.raises(CheckpointCorruptError) as info:
            decode_manifest(json.dumps(data).encode(), source="iter_000000100/m.json")
        text = str(info.value)
        assert text.startswith("iter_000000100/m.json: ")
        assert message in text
        assert "resume from another one or move it aside" in text

    def test_not_json(self) -> None:
        """Bytes that are not JSON are corrupt, not a crash."""
        with pytest.raises(CheckpointCorruptError, match="not valid JSON"):
            decode_manifest(b"\x00\x01", source="m")
