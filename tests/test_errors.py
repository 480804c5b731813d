"""The error hierarchy (statecraft.errors): one package, one public module, structured fields,
picklable."""

from __future__ import annotations

import ast
import inspect
import pickle
from pathlib import Path

import pytest

import statecraft
from statecraft import errors
from statecraft.errors import (
    CheckpointCorruptError,
    ConfigError,
    ConfigIssue,
    MachineDefinitionError,
    NotSupportedYetError,
    StatecraftError,
    StoreError,
    TrainerStateError,
)

PACKAGE = Path(statecraft.__file__).parent


def _error_classes() -> list[type[StatecraftError]]:
    return [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, StatecraftError)
    ]


class TestOnePackage:
    def test_no_error_class_is_defined_outside_the_errors_package(self) -> None:
        """Every class deriving from a statecraft error is defined in statecraft/errors/."""
        names = {cls.__name__ for cls in _error_classes()}
        outside = []
        for path in PACKAGE.rglob("*.py"):
            if path.parent == PACKAGE / "errors":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                    if bases & names:
                        outside.append(f"{path.relative_to(PACKAGE)}:{node.name}")
        assert outside == []

    def test_the_public_module_exports_every_name_sorted(self) -> None:
        """``__all__`` is sorted, names every error class, and each name is importable from
        ``statecraft.errors`` under that public module name (what pickles and tracebacks show)."""
        assert errors.__all__ == sorted(errors.__all__)
        assert {cls.__name__ for cls in _error_classes()} <= set(errors.__all__)
        for name in errors.__all__:
            assert getattr(errors, name).__module__ == "statecraft.errors", name
        assert errors._rebuild.__module__ == "statecraft.errors"

    def test_every_error_has_a_code_and_a_builtin_base(self) -> None:
        """Each error has its own code and also derives from a builtin exception type."""
        codes = [cls.code for cls in _error_classes()]
        assert len(codes) == len(set(codes))
        for cls in _error_classes():
            if cls is StatecraftError:
                continue
            builtin = [b for b in cls.__mro__ if b.__module__ == "builtins" and b is not object]
            assert any(b not in (Exception, BaseException) for b in builtin), cls


class TestStructuredFields:
    def test_fields_are_attributes_and_json(self) -> None:
        """Keyword fields become attributes and appear in to_json with code and message."""
        error = StoreError("disk full at iter_000000004/model.pt", path="iter_4", needed=10)
        assert error.path == "iter_4"
        assert error.needed == 10
        assert error.to_json() == {
            "code": "store_error",
            "message": "disk full at iter_000000004/model.pt",
            "path": "iter_4",
            "needed": 10,
        }

    def test_named_constructors_fill_their_fields(self) -> None:
        """Errors with their own constructor carry the facts they were built from."""
        corrupt = CheckpointCorruptError("iter_2/model.pt", "is missing", "Resume elsewhere.")
        assert (corrupt.path, corrupt.problem) == ("iter_2/model.pt", "is missing")
        config = ConfigError([ConfigIssue("save_every", -1, "an int >= 0")])
        assert config.fields["source"] == "checkpoint config"
        assert config.to_json()["issues"] == ["save_every: got -1; expected an int >= 0"]
        unsupported = NotSupportedYetError("checkpoint_format", "dcp", "use consolidated")
        assert unsupported.to_json()["knob"] == "checkpoint_format"

    @pytest.mark.parametrize(
        "error",
        [
            CheckpointCorruptError("iter_2/model.pt", "is missing", "Resume elsewhere."),
            MachineDefinitionError("machines/x.toml", ["state 'a' is unreachable"]),
            TrainerStateError("bad clocks", source="trainer.pt", problems=["iter: -1"]),
            StoreError("plain message"),
        ],
    )
    def test_pickles_with_class_message_and_fields(self, error: StatecraftError) -> None:
        """An error crosses a process boundary (rank 0 to the others) intact."""
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert str(copy) == str(error)
        assert copy.fields == error.fields

    def test_a_pickle_names_only_the_public_module(self) -> None:
        """An error pickles by ``statecraft.errors.<Class>`` (and ``statecraft.errors._rebuild``),
        never by a private module of the package, so it loads whatever the package's layout."""
        data = pickle.dumps(ConfigError([ConfigIssue("save_every", -1, "an int >= 0")]))
        assert b"statecraft.errors._" not in data.replace(b"statecraft.errors._rebuild", b"")

    def test_a_pickle_written_before_the_package_split_still_loads(self) -> None:
        """Bytes pickled when ``statecraft.errors`` was one file load to the same class and
        fields, and pickling the same error again writes the very same bytes."""
        old = (
            b"\x80\x02cstatecraft.errors\n_rebuild\nq\x00cstatecraft.errors\nCheckpointCorruptError"
            b"\nq\x01X\x22\x00\x00\x00iter_2/model.pt: is missing. Look.q\x02}q\x03(X\x04\x00\x00"
            b"\x00pathq\x04X\x0f\x00\x00\x00iter_2/model.ptq\x05X\x07\x00\x00\x00problemq\x06X\n"
            b"\x00\x00\x00is missingq\x07u\x87q\x08Rq\t}q\n(X\x06\x00\x00\x00fieldsq\x0bh\x03h"
            b"\x04h\x05h\x06h\x07ub."
        )
        error = CheckpointCorruptError("iter_2/model.pt", "is missing", "Look.")
        copy = pickle.loads(old)
        assert type(copy) is CheckpointCorruptError
        assert (str(copy), copy.fields) == (str(error), error.fields)
        assert pickle.dumps(error, protocol=2) == old

    @pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
    def test_every_error_class_pickles(self, cls: type[StatecraftError]) -> None:
        """Every error class, also those that are both a ``RuntimeError`` and an ``OSError``
        (``ArchiveMismatchError``, ``UnitNotCommittedError``), round-trips with its fields."""
        error = errors._rebuild(cls, "what happened", {"path": "iter_1", "problems": ["a"]})
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls
        assert str(copy) == "what happened"
        assert copy.fields == {"path": "iter_1", "problems": ["a"]}
        assert copy.path == "iter_1"
