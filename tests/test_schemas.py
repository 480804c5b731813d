"""JSON schemas of specs/ enforced on the files they describe (statecraft.checkpoint.kernel.schemas,
statecraft.engine.schema, and their two call sites in statecraft.checkpoint.kernel.manifest)."""

from __future__ import annotations

import json

import attrs
import pytest

from statecraft.checkpoint.kernel.manifest import FileEntry, Manifest, decode_manifest
from statecraft.checkpoint.kernel.schemas import MANIFEST_SCHEMA_FILE, schema_violations
from statecraft.engine import load_spec
from statecraft.engine.schema import compile_schema, json_path, schema_problems
from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.resources import spec_path
from statecraft.storage.digest import Digest

DIGEST = Digest("xxh3_128", "ab" * 16)
MANIFEST = Manifest(
    schema="statecraft.checkpoint-manifest.v2",
    iteration=100,
    format="consolidated",
    components=("model", "optimizer", "training_state"),
    files={"model.pt": FileEntry(10, DIGEST), "trainer.pt": FileEntry(3, DIGEST)},
    writer={"torch": "2.13"},
)


class TestEngineSchema:
    def test_valid_schema_has_no_problems(self) -> None:
        """A valid 2020-12 schema passes check_schema."""
        assert schema_problems({"type": "object", "required": ["a"]}) == []

    def test_invalid_schema_names_the_keyword(self) -> None:
        """An invalid schema is reported with the offending value and its path."""
        (problem,) = schema_problems({"properties": {"a": {"type": "thing"}}})
        assert "'thing' is not valid under any of the given schemas" in problem
        assert problem.endswith("at $.properties.a.type")

    def test_not_an_object(self) -> None:
        """A schema that is neither an object nor a boolean is refused."""
        assert schema_problems([1]) == ["a JSON Schema is an object or a boolean, got list"]
        with pytest.raises(ValueError, match="got list"):
            compile_schema([1])

    def test_json_path(self) -> None:
        """Paths use dots for identifiers, brackets for indices and other keys."""
        assert json_path(["files", "model.pt", "size"]) == "$.files['model.pt'].size"
        assert json_path(["components", 2]) == "$.components[2]"
        assert json_path([]) == "$"


class TestManifestSchema:
    def test_the_spec_names_this_schema(self) -> None:
        """specs/save.toml's manifest entry names the schema the manifest code enforces."""
        spec = load_spec(spec_path("save"))
        (entry,) = [f for f in spec.files if f.name.endswith(".posttrain-manifest.json")]
        assert entry.schema_file == MANIFEST_SCHEMA_FILE
        assert entry.schema is not None

    def test_a_valid_manifest_conforms(self) -> None:
        """What save writes conforms, and round-trips."""
        data = MANIFEST.encode()
        assert schema_violations(MANIFEST_SCHEMA_FILE, json.loads(data)) == []
        assert decode_manifest(data, source="m") == MANIFEST

    def test_encode_refuses_an_invalid_manifest(self) -> None:
        """A bug that builds a manifest the schema refuses fails before any byte is written."""
        bad = attrs.evolve(MANIFEST, components=("model", "weights"))
        with pytest.raises(CheckpointError) as info:
            bad.encode()
        text = str(info.value)
        assert "refusing to write the manifest of iteration 100" in text
        assert f"violates specs/{MANIFEST_SCHEMA_FILE}" in text
        assert "$.components[1]: 'weights' is not one of" in text

    @pytest.mark.parametrize(
        ("mutate", "words"),
        [
            (
                lambda d: d.update(format="zip"),
                "$.format: 'zip' is not one of ['consolidated', 'dcp', 'incremental']",
            ),
            (lambda d: d.update(components=["model", "model"]), "$.components: ['model', 'model']"),
            (lambda d: d.update(iteration=10**10), "$.iteration: 10000000000 is greater than"),
            (lambda d: d.update(components=["weights"]), "$.components[0]: 'weights' is not one"),
        ],
    )
    def test_decode_refuses_a_manifest_that_breaks_the_schema(self, mutate, words) -> None:
        """A doctored manifest that parses but breaks the schema is corrupt, with the path."""
        data = json.loads(MANIFEST.encode())
        mutate(data)
        with pytest.raises(CheckpointCorruptError) as info:
            decode_manifest(json.dumps(data).encode(), source="iter_000000100/m.json")
        text = str(info.value)
        assert text.startswith("iter_000000100/m.json: manifest violates specs/")
        assert words in text
        assert "resume from another one or move it aside" in text
