"""The archive declaration record (statecraft.checkpoint.archive.declaration): canonical
encoding, the JSON schema specs/archive-declaration.schema.json enforced on encode and decode,
clear errors for malformed declarations, and read_declaration over a bucket."""

from __future__ import annotations

import json

import pytest

from statecraft.checkpoint.archive.declaration import (
    DECLARATION_NAME,
    DECLARATION_SCHEMA,
    DECLARATION_SCHEMA_FILE,
    ArchiveDeclaration,
    decode_declaration,
    read_declaration,
)
from statecraft.checkpoint.archive.inventory import ArchiveEntry
from statecraft.checkpoint.kernel.layout import ARTIFACT_MANIFEST_NAME
from statecraft.engine import load_spec
from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.resources import spec_path
from statecraft.storage.objects import SimBucket

SHA = "ab" * 32
DECLARATION = ArchiveDeclaration.of(
    100, [ArchiveEntry("model.pt", 10, SHA), ArchiveEntry(ARTIFACT_MANIFEST_NAME, 3, "cd" * 32)]
)


class TestArchiveDeclaration:
    def test_round_trip_is_canonical_and_sorted(self) -> None:
        """encode sorts the files by path and decodes back to the same record."""
        data = DECLARATION.encode()
        assert decode_declaration(data, source="s3://b/k") == DECLARATION
        raw = json.loads(data)
        assert raw["schema"] == DECLARATION_SCHEMA
        assert [f["path"] for f in raw["files"]] == [ARTIFACT_MANIFEST_NAME, "model.pt"]
        assert DECLARATION.payloads == (ArchiveEntry("model.pt", 10, SHA),)
        assert DECLARATION.manifest_entry.size == 3

    def test_the_spec_names_this_schema(self) -> None:
        """specs/publish.toml's declaration entry names the schema the code enforces."""
        spec = load_spec(spec_path("publish"))
        (entry,) = [f for f in spec.files if f.name.endswith(DECLARATION_NAME)]
        assert entry.schema_file == DECLARATION_SCHEMA_FILE
        assert entry.schema is not None

    def test_a_record_without_sha256_is_never_written(self) -> None:
        """A declaration entry without sha256 (or without the manifest) is refused on encode."""
        with pytest.raises(CheckpointError, match="sha256 None"):
            ArchiveDeclaration.of(1, [ArchiveEntry("model.pt", 1), DECLARATION.files[0]]).encode()
        with pytest.raises(CheckpointError, match="do not list the commit record"):
            ArchiveDeclaration.of(1, [ArchiveEntry("model.pt", 1, SHA)]).encode()

    @pytest.mark.parametrize(
        ("data", "problem"),
        [
            (b"{not json", "is not valid JSON"),
            (b'{"schema": "other"}', "schema is 'other'"),
            (b"[1]", "schema is 'list'"),
            (
                json.dumps({"schema": DECLARATION_SCHEMA, "iteration": 1}).encode(),
                "violates specs/archive-declaration.schema.json",
            ),
            (
                DECLARATION.encode().replace(SHA.encode(), b"XYZ"),
                "violates specs/archive-declaration.schema.json",
            ),
            (
                DECLARATION.encode().replace(b'"model.pt"', b'"../model.pt"'),
                "not a plain relative path",
            ),
        ],
    )
    def test_malformed_declarations_are_clear_errors(self, data: bytes, problem: str) -> None:
        """Each malformed declaration is a CheckpointCorruptError naming the source, the
        problem and what to do."""
        with pytest.raises(CheckpointCorruptError) as info:
            decode_declaration(data, source="s3://b/iter_000000100/.posttrain-archive.json")
        message = str(info.value)
        assert message.startswith("s3://b/iter_000000100/.posttrain-archive.json: ")
        assert problem in message
        assert "statecraft never replaces it" in message

    def test_differences_name_each_file(self) -> None:
        """differences lists every file whose size or sha256 differs, or that one side lacks."""
        other = ArchiveDeclaration.of(
            100,
            [
                ArchiveEntry("model.pt", 11, SHA),
                ArchiveEntry("optim.pt", 1, SHA),
                DECLARATION.manifest_entry,
            ],
        )
        problems = DECLARATION.differences(other)
        assert problems == [
            f"model.pt: declared size 11 sha256 {SHA}, here size 10 sha256 {SHA}",
            "optim.pt is declared there but not here",
        ]

    def test_read_declaration(self) -> None:
        """read_declaration decodes the object; a missing one is FileNotFoundError."""
        bucket = SimBucket()
        bucket.put("p/.posttrain-archive.json", DECLARATION.encode())
        assert read_declaration(bucket, "p/.posttrain-archive.json") == DECLARATION
        with pytest.raises(FileNotFoundError):
            read_declaration(bucket, "q/.posttrain-archive.json")
