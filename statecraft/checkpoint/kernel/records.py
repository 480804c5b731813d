"""One codec for the JSON records statecraft commits: manifests, markers, leases, receipts.

Every record (the checkpoint, artifact, direct and unit manifests, the retention, validation,
release and archive records, ``DONE.json``, the writer leases) is an attrs class written as
canonical JSON (sorted keys, a final newline) and read back with every check, by one
:class:`RecordCodec`:

encode
    unstructure the record, refuse it when its value checks (``problems``) object, check it
    against its JSON schema of ``specs/`` (when it has one), and return the bytes: a bug in
    the code that built it fails before anything is written (:class:`CheckpointError`).
decode
    in this order: the size bound (``max_bytes``), JSON, the schema name (``schema`` or one
    of ``readable``), the JSON schema (first, or last with ``schema_first=False``), the
    ``upgrade`` of an older shape, strict cattrs structuring, the value checks. The first
    failure is one error built by ``error(source, problem, fix)`` (by default a
    :class:`CheckpointCorruptError`), its problem opening with the record's name ``what``.

Example::

    _CODEC = record_codec(
        WeightsOnlyRecord, schema=WEIGHTS_ONLY_SCHEMA, fix="Move it aside.", not_json="is not JSON"
    )
    data = _CODEC.encode(record, what="the weights-only marker")
    record = _CODEC.read(store, "iter_000000004/.retention-weights-only.json")
"""

from __future__ import annotations

import json
from collections.abc import Callable

# Any: raw JSON (``json.loads``) before cattrs structures and checks it, and cattrs' own hook
# signatures, which are untyped.
from typing import Any, Generic, TypeVar

import attrs
import cattrs

from statecraft.checkpoint.kernel.schemas import encode_conforming, json_text_violations
from statecraft.errors import CheckpointCorruptError, CheckpointError
from statecraft.storage.base import Store

__all__ = [
    "RecordCodec",
    "RecordProblem",
    "canonical_json",
    "record_codec",
    "strict_converter",
    "structure_record",
]

T = TypeVar("T")
#: builds the one error of a refused record from ``(source, problem, fix)``
ErrorFactory = Callable[[str, str, str], Exception]


def _strict(kind: type) -> Any:
    def structure(value: Any, _: type) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return value

    return structure


def strict_converter() -> cattrs.Converter:
    """A converter for the JSON records statecraft writes: unknown keys are refused, and an
    ``int``, ``bool`` or ``str`` field takes exactly that type (no ``"3"`` for 3, no ``true``
    for 1, no ``1`` for true)."""
    converter = cattrs.Converter(forbid_extra_keys=True)
    for kind in (int, bool, str):  # bool after int: a bool field is not the int hook's
        converter.register_structure_hook(kind, _strict(kind))
    return converter


def structure_record(
    converter: cattrs.Converter,
    raw: Any,
    kind: type[T],
    *,
    source: str,
    what: str,
    fix: str,
    error: ErrorFactory = CheckpointCorruptError,
) -> T:
    """``raw`` (parsed JSON) structured as ``kind``.

    Raises:
        CheckpointCorruptError: (or what ``error`` builds) a field is missing, unknown or of
            the wrong type; the message names ``source``, ``what`` the record is and every
            malformed field (cattrs' paths), and ends with ``fix``.
    """
    try:
        return converter.structure(raw, kind)
    except Exception as exc:
        detail = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise error(source, _named(what, f"fields are malformed: {detail}"), fix) from None


def canonical_json(document: Any, *, indent: int = 1) -> bytes:
    """``document`` as statecraft writes records: sorted keys, ``indent``, a final newline."""
    return (json.dumps(document, sort_keys=True, indent=indent) + "\n").encode()


class RecordProblem(Exception):
    """Raised by a codec's ``upgrade`` hook for a document it refuses: ``problem`` (after the
    record's name) and, when the usual one does not fit, its own ``fix``."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


def _named(what: str, text: str) -> str:
    return f"{what} {text}" if what else text


@attrs.frozen
class RecordCodec(Generic[T]):
    """How one kind of record is written and read (see the module docstring); build it with
    :func:`record_codec`.

    Attributes:
        kind: the attrs class.
        schema: the schema name it writes (the ``"schema"`` key).
        what: how messages name it (``"manifest"``; empty: the source alone names it).
        fix: what to do about a refused one, ending every decode error.
        readable: further schema names it reads (older versions).
        schema_file: its JSON schema under ``specs/`` (``None``: none).
        schema_first: check the JSON schema before structuring (else after the value checks).
        max_bytes: larger bytes are refused before they are parsed (``None``: no bound).
        indent: of the canonical JSON.
        not_json, wrong_schema: the wording of those two refusals (``wrong_schema`` formats
            ``found`` and ``expected``).
        error: builds the one error from ``(source, problem, fix)``.
        upgrade: the parsed document (a dict of a readable schema) in the shape ``kind``
            structures from; raises :class:`RecordProblem` to refuse it.
        problems: what makes a structured record invalid (empty: valid), checked on encode and
            decode.
        converter: the cattrs converter (default :func:`strict_converter`).
    """

    kind: type[T]
    schema: str
    what: str
    fix: str
    readable: tuple[str, ...] = ()
    schema_file: str | None = None
    schema_first: bool = True
    max_bytes: int | None = None
    indent: int = 1
    not_json: str = "is not valid JSON"
    wrong_schema: str = "schema is {found!r}, expected {expected!r}"
    error: ErrorFactory = CheckpointCorruptError
    upgrade: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    problems: Callable[[T], list[str]] | None = None
    converter: cattrs.Converter = attrs.field(factory=strict_converter, repr=False)

    def encode(self, record: T, *, what: str) -> bytes:
        """The canonical bytes of ``record`` (``what`` names it in the refusal).

        Raises:
            CheckpointError: the value checks refuse it, or it breaks its JSON schema (a bug in
                the code that built it); nothing is written.
        """
        problems = self.problems(record) if self.problems is not None else []
        if problems:
            raise CheckpointError(f"refusing to write {what}: " + "; ".join(problems))
        return self.encode_document(self.converter.unstructure(record), what=what)

    def encode_document(self, document: Any, *, what: str) -> bytes:
        """The canonical bytes of an unstructured ``document``, checked against the JSON schema
        (for a record written in another shape than ``kind`` unstructures to)."""
        if self.schema_file is None:
            return canonical_json(document, indent=self.indent)
        return encode_conforming(document, self.schema_file, what=what)

    def decode(self, data: bytes, *, source: str) -> T:
        """The record in ``data`` (``source`` names it in messages), checked in the order of
        the module docstring.

        Raises:
            CheckpointCorruptError: (or what ``error`` builds) the first check that fails,
                naming ``source``, the problem and ending with ``fix``.
        """
        try:
            return self._decode(data, source)
        except RecursionError:
            raise self._refuse(
                source,
                "is nested too deeply to parse (RecursionError); a statecraft record is a few "
                "levels deep",
            ) from None

    def read(self, store: Store, path: str, *, unreadable_is_damage: bool = False) -> T:
        """The record stored at ``path`` of ``store`` (named ``<store>/<path>``).

        Args:
            unreadable_is_damage: a file there that cannot be read (a special file, an I/O
                error) is refused like a damaged record, for records whose presence alone
                counts (a retention marker); otherwise that error propagates.

        Raises:
            FileNotFoundError: there is none.
            CheckpointCorruptError: as :meth:`decode`.
        """
        source = f"{store.describe()}/{path}"
        try:
            data = store.read_bytes(path)
        except FileNotFoundError:
            raise
        except Exception as exc:
            if not unreadable_is_damage:
                raise
            raise self._refuse(source, f"cannot be read ({exc})") from None
        return self.decode(data, source=source)

    def _refuse(self, source: str, problem: str, fix: str | None = None) -> Exception:
        return self.error(source, _named(self.what, problem), self.fix if fix is None else fix)

    def _decode(self, data: bytes, source: str) -> T:
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise self._refuse(source, f"is over {self.max_bytes} bytes")
        try:
            raw: Any = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._refuse(source, f"{self.not_json} ({exc})") from None
        found = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
        if not isinstance(raw, dict) or found not in (self.schema, *self.readable):
            raise self._refuse(source, self.wrong_schema.format(found=found, expected=self.schema))
        if self.schema_first:
            self._check_schema(data, source)
        try:
            shaped = raw if self.upgrade is None else self.upgrade(raw)
        except RecordProblem as refused:
            raise self._refuse(source, refused.problem, refused.fix) from None
        record = structure_record(
            self.converter,
            shaped,
            self.kind,
            source=source,
            what=self.what,
            fix=self.fix,
            error=self.error,
        )
        problems = self.problems(record) if self.problems is not None else []
        if problems:
            raise self._refuse(source, "values are invalid: " + "; ".join(problems))
        if not self.schema_first:
            self._check_schema(data, source)
        return record

    def _check_schema(self, data: bytes, source: str) -> None:
        if self.schema_file is None:
            return
        violations = json_text_violations(self.schema_file, bytes(data))
        if violations:
            raise self._refuse(
                source, f"violates specs/{self.schema_file}: {'; '.join(violations)}"
            )


def record_codec(
    kind: type[T],
    *,
    schema: str,
    fix: str,
    what: str = "",
    readable: tuple[str, ...] = (),
    schema_file: str | None = None,
    schema_first: bool = True,
    max_bytes: int | None = None,
    indent: int = 1,
    not_json: str = "is not valid JSON",
    wrong_schema: str = "schema is {found!r}, expected {expected!r}",
    error: ErrorFactory = CheckpointCorruptError,
    upgrade: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    problems: Callable[[T], list[str]] | None = None,
    converter: cattrs.Converter | None = None,
) -> RecordCodec[T]:
    """The :class:`RecordCodec` of ``kind`` (its attributes say what each argument means).

    Raises:
        CheckpointError: ``schema`` is empty or ``max_bytes`` is not positive (a definition
            bug, raised at import).
    """
    if not schema or (max_bytes is not None and max_bytes <= 0):
        raise CheckpointError(
            f"record_codec({kind.__name__}): schema {schema!r} must be a name and max_bytes "
            f"{max_bytes!r} positive; fix the codec's definition"
        )
    return RecordCodec(
        kind,
        schema,
        what,
        fix,
        readable=readable,
        schema_file=schema_file,
        schema_first=schema_first,
        max_bytes=max_bytes,
        indent=indent,
        not_json=not_json,
        wrong_schema=wrong_schema,
        error=error,
        upgrade=upgrade,
        problems=problems,
        converter=converter or strict_converter(),
    )
