"""The error hierarchy (statecraft.errors): one module, structured fields, picklable."""

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


class TestOneModule:
    def test_no_error_class_is_defined_outside_errors_py(self) -> None:
        """Every class deriving from a statecraft error is defined in statecraft/errors.py."""
        names = {cls.__name__ for cls in _error_classes()}
        outside = []
        for path in PACKAGE.rglob("*.py"):
            if path.name == "errors.py" and path.parent == PACKAGE:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                    if bases & names:
                        outside.append(f"{path.relative_to(PACKAGE)}:{node.name}")
        assert outside == []

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
