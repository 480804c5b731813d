"""The root of the hierarchy: :class:`StatecraftError`, its structured fields, and how every
error pickles (by the class's public name, rebuilt without calling ``__init__``)."""

from __future__ import annotations

from typing import Any

__all__ = ["StatecraftError"]


def _rebuild(cls: type[StatecraftError], message: str, fields: dict[str, Any]) -> StatecraftError:
    """Unpickle an error without calling its ``__init__`` (whose signature may differ).

    An error that is also an ``OSError`` (``ArchiveMismatchError`` is a ``CheckpointError``, so a
    ``RuntimeError``, and a ``FileExistsError``) is made by ``OSError.__new__``: the first
    ``__new__`` on its MRO is ``RuntimeError``'s, which Python refuses for an ``OSError`` layout.
    """
    maker: type[BaseException] = OSError if issubclass(cls, OSError) else Exception
    error = maker.__new__(cls)
    Exception.__init__(error, message)
    error._set_fields(fields)
    return error


class StatecraftError(Exception):
    """Root of every error statecraft raises on purpose.

    Args:
        message: what was found, what was expected, what to do.
        fields: the same facts for programs (a path, a knob, a state); each is also an
            attribute, and :meth:`to_json` returns them with the code and the message.

    Errors pickle with their fields (they cross process boundaries: rank 0's error is
    re-raised on every rank).
    """

    code: str = "statecraft_error"

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self._set_fields(fields)

    def _set_fields(self, fields: dict[str, Any]) -> None:
        self.fields: dict[str, Any] = dict(fields)
        for name, value in fields.items():
            setattr(self, name, value)

    def to_json(self) -> dict[str, Any]:
        """``{"code", "message", **fields}`` with non-JSON values rendered as text."""
        out: dict[str, Any] = {"code": self.code, "message": str(self)}
        for name, value in getattr(self, "fields", {}).items():
            is_json = value is None or isinstance(value, str | int | float | bool)
            out[name] = (
                value
                if is_json
                else [str(v) for v in value]
                if isinstance(value, list | tuple)
                else str(value)
            )
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), str(self), getattr(self, "fields", {})), self.__dict__)
