"""The record codec (every JSON commit record's encode and decode) and the check of the files a
commit record lists."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import pytest

from statecraft.checkpoint.kernel.listed_files import first_listed_mismatch, listed_file_mismatch
from statecraft.checkpoint.kernel.manifest import FileEntry
from statecraft.checkpoint.kernel.records import RecordProblem, record_codec
from statecraft.errors import CheckpointCorruptError, CheckpointError, WriterLeaseError
from statecraft.storage.digest import Digest
from statecraft.storage.local import LocalStore


@attrs.frozen
class Note:
    """A record for the tests: a name and a count."""

    schema: str
    name: str
    count: int


def _negative(note: Note) -> list[str]:
    return [f"count {note.count} is negative"] if note.count < 0 else []


def _no_old(raw: dict[str, Any]) -> dict[str, Any]:
    if raw.get("name") == "old":
        raise RecordProblem("names an old thing", fix="Upgrade.")
    return {**raw, "schema": "t.note.v2"} if raw["schema"] == "t.note.v1" else raw


CODEC = record_codec(
    Note,
    schema="t.note.v2",
    readable=("t.note.v1",),
    what="note",
    fix="Move it aside.",
    max_bytes=200,
    upgrade=_no_old,
    problems=_negative,
)
NOTE = Note("t.note.v2", "a", 1)


def refusal(data: bytes, codec: Any = CODEC) -> str:
    with pytest.raises(CheckpointCorruptError) as info:
        codec.decode(data, source="src")
    return str(info.value)


class TestRecordCodec:
    def test_round_trip_canonical_bytes(self) -> None:
        """encode writes sorted keys, one-space indent and a final newline; decode reads it."""
        data = CODEC.encode(NOTE, what="the note")
        assert data == (json.dumps(attrs.asdict(NOTE), sort_keys=True, indent=1) + "\n").encode()
        assert CODEC.decode(data, source="src") == NOTE

    def test_encode_refuses_what_the_value_checks_refuse(self) -> None:
        """A record its value checks refuse is never encoded, the message naming it."""
        with pytest.raises(CheckpointError, match="refusing to write the note: count -1"):
            CODEC.encode(Note("t.note.v2", "a", -1), what="the note")

    @pytest.mark.parametrize(
        ("data", "words"),
        [
            (b"x" * 201, "src: note is over 200 bytes. Move it aside."),
            (b"{", "src: note is not valid JSON ("),
            (b"[1]", "src: note schema is 'list', expected 't.note.v2'"),
            (b'{"schema": "t.other"}', "src: note schema is 't.other', expected 't.note.v2'"),
            (
                b'{"schema": "t.note.v2", "name": "old", "count": 1}',
                "src: note names an old thing. Upgrade.",
            ),
            (b'{"schema": "t.note.v2", "name": "a", "count": "1"}', "note fields are malformed"),
            (b'{"schema": "t.note.v2", "name": "a", "count": -1}', "note values are invalid"),
        ],
    )
    def test_each_refusal_names_the_source_the_problem_and_the_fix(
        self, data: bytes, words: str
    ) -> None:
        """Every check refuses with one CheckpointCorruptError: source, problem, fix."""
        assert words in refusal(data)

    def test_a_document_nested_too_deeply(self) -> None:
        """JSON deeper than the parser's recursion is refused as such, not as a crash."""
        codec = attrs.evolve(CODEC, max_bytes=None)
        message = refusal(b"[" * 100_000 + b"]" * 100_000, codec)
        assert "src: note is nested too deeply to parse (RecursionError)" in message

    def test_an_older_readable_schema_is_upgraded(self) -> None:
        """A document of a readable older schema is read through ``upgrade``."""
        data = b'{"schema": "t.note.v1", "name": "a", "count": 1}'
        assert CODEC.decode(data, source="src") == NOTE

    def test_the_json_schema_is_checked(self) -> None:
        """A record with a JSON schema is refused naming the schema file and the path."""
        from statecraft.checkpoint.fencing.object_lease_record import decode_object_lease

        with pytest.raises(WriterLeaseError, match=r"violates specs/object-lease\.schema\.json"):
            decode_object_lease(b'{"schema": "statecraft.object-lease.v1"}', "src")

    def test_another_error_shape(self) -> None:
        """``error`` builds the one error of a refusal (a lease's WriterLeaseError)."""

        def lease_error(where: str, problem: str, fix: str) -> WriterLeaseError:
            return WriterLeaseError(f"{where}: {problem}. {fix}", path=where)

        codec = attrs.evolve(CODEC, error=lease_error)
        with pytest.raises(WriterLeaseError, match="src: note is not valid JSON"):
            codec.decode(b"{", source="src")

    def test_read_names_the_store_path(self, tmp_path: Path) -> None:
        """read decodes a stored file, naming ``<store>/<path>``; absence propagates."""
        store = LocalStore(tmp_path)
        store.write_atomic("n.json", b"{")
        with pytest.raises(CheckpointCorruptError, match=r"n\.json: note is not valid JSON"):
            CODEC.read(store, "n.json")
        with pytest.raises(FileNotFoundError):
            CODEC.read(store, "absent.json")

    def test_an_unreadable_file_is_damage_only_when_asked(self, tmp_path: Path) -> None:
        """A directory where the record should be: damage with ``unreadable_is_damage``,
        the store's own error otherwise."""
        store = LocalStore(tmp_path)
        store.make_dirs("n.json")
        with pytest.raises(CheckpointCorruptError, match="note cannot be read"):
            CODEC.read(store, "n.json", unreadable_is_damage=True)
        with pytest.raises(Exception) as info:
            CODEC.read(store, "n.json")
        assert not isinstance(info.value, CheckpointCorruptError)

    def test_a_bad_definition_is_refused(self) -> None:
        """A codec without a schema name or with a bound below 1 is a definition error."""
        with pytest.raises(CheckpointError, match="fix the codec's definition"):
            record_codec(Note, schema="", fix="x")
        with pytest.raises(CheckpointError, match="max_bytes 0"):
            record_codec(Note, schema="t", fix="x", max_bytes=0)


class TestListedFiles:
    @pytest.fixture
    def store(self, tmp_path: Path) -> LocalStore:
        store = LocalStore(tmp_path)
        store.make_dirs("d")
        store.write_atomic("d/a.bin", b"abc")
        return store

    def test_a_listed_file_that_matches(self, store: LocalStore) -> None:
        """A present regular file of the recorded size and digest: no mismatch."""
        entry = FileEntry(3, Digest.of(b"abc"))
        assert first_listed_mismatch(store, "d", {"a.bin": entry}, hashed=lambda n: True) is None

    def test_each_difference(self, store: LocalStore, tmp_path: Path) -> None:
        """Missing, special, size and digest differences, each with what was found."""
        entry = FileEntry(3, Digest.of(b"xyz"))
        os.symlink(tmp_path / "d" / "a.bin", tmp_path / "d" / "link.bin")
        missing = listed_file_mismatch(store, "d/no.bin", entry, digest=True)
        special = listed_file_mismatch(store, "d/link.bin", entry, digest=True)
        size = listed_file_mismatch(store, "d/a.bin", FileEntry(4, entry.digest), digest=True)
        digest = listed_file_mismatch(store, "d/a.bin", entry, digest=True)
        assert listed_file_mismatch(store, "d/a.bin", entry, digest=False) is None
        assert missing is not None
        assert missing.problem("the manifest") == "is missing"
        assert special is not None
        assert special.found_kind == "symlink"
        assert size is not None
        assert size.problem("the manifest").startswith("has 3 bytes, the manifest recorded 4")
        assert digest is not None
        assert digest.found_digest == Digest.of(b"abc")
        error = digest.error("the manifest", fixes=("m.", "s.", "c."))
        assert str(error).startswith(f"{store.describe()}/d/a.bin: digest ")
        assert str(error).endswith(" c.")

    def test_the_first_by_name(self, store: LocalStore) -> None:
        """Of several listed files the first difference by name is reported."""
        entry = FileEntry(3, Digest.of(b"abc"))
        found = first_listed_mismatch(store, "d", {"z.bin": entry, "b.bin": entry, "a.bin": entry})
        assert found is not None
        assert found.name == "b.bin"
