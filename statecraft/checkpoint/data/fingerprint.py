"""A data source's semantic identity: :class:`Fingerprint`, and what changed between two.

A fingerprint identifies *what the cursor indexes*, not the bytes on disk: the ordered,
filtered rows (each in canonical JSON, so key order and whitespace do not count), the
cursor-relevant preprocessing settings, and for tar-backed sources each distinct archive's
normalized relative path and size (row offsets depend on the archive's byte layout). No mtimes,
no per-media stat calls (docs/checkpointing.md, "Data").

The record keeps the parts next to the digest so that a mismatch can say *what* changed: rows
added or removed (the count), rows reordered (same multiset, another order), rows edited (same
count, another multiset), a preprocessing key changed, an archive changed. A source that
declares an opaque identity (``fingerprint()`` returning a ``str``) gets a record with only the
digest; a mismatch then says the declared fingerprint changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = ["FINGERPRINT_VERSION", "Fingerprint", "canonical_json", "sha256_hex"]

FINGERPRINT_VERSION = 1
_KEYS = frozenset({"version", "digest", "rows", "rows_ordered", "rows_set", "preprocessing",
                   "archives"})  # fmt: skip


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, no whitespace, unicode kept.

    Raises:
        TypeError: a value JSON cannot hold (name it in the caller's message).
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)  # fmt: skip


def sha256_hex(text: str) -> str:
    """The SHA-256 hex digest of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@attrs.frozen(kw_only=True)
class Fingerprint:
    """The semantic identity of one data source.

    Attributes:
        digest: SHA-256 over everything below (the identity two runs compare).
        rows: the number of ordered, filtered rows (``None`` for an opaque fingerprint).
        rows_ordered: the hash of the row hashes in order.
        rows_set: the hash of the sorted row hashes (order-free: tells reordering from edits).
        preprocessing: the cursor-relevant preprocessing settings, as given (JSON values).
        archives: ``(JSONL-relative path, size)`` of each distinct archive, sorted.
    """

    digest: str
    rows: int | None = None
    rows_ordered: str | None = None
    rows_set: str | None = None
    preprocessing: dict[str, Any] = attrs.field(factory=dict)
    archives: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of_rows(
        cls,
        rows: Iterable[Any],
        *,
        preprocessing: Mapping[str, Any] | None = None,
        archives: Iterable[tuple[str, int]] = (),
    ) -> Fingerprint:
        """The fingerprint of ``rows`` (JSON values, in order) with ``preprocessing`` and
        ``archives``.

        Raises:
            TypeError: a row or a preprocessing value JSON cannot hold.
        """
        hashes = [sha256_hex(canonical_json(row)) for row in rows]
        settings = dict(preprocessing or {})
        try:
            canonical_json(settings)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"preprocessing settings must be JSON values (str, number, bool, None, lists, "
                f"dicts with str keys): {exc}"
            ) from None
        shelf = tuple(sorted(set(archives)))
        ordered = sha256_hex("\n".join(hashes))
        body = {
            "version": FINGERPRINT_VERSION,
            "rows_ordered": ordered,
            "preprocessing": settings,
            "archives": [list(a) for a in shelf],
        }
        return cls(
            digest=sha256_hex(canonical_json(body)),
            rows=len(hashes),
            rows_ordered=ordered,
            rows_set=sha256_hex("\n".join(sorted(hashes))),
            preprocessing=settings,
            archives=shelf,
        )

    @classmethod
    def opaque(cls, declared: str) -> Fingerprint:
        """A fingerprint a source declared as one string (only the digest is compared)."""
        return cls(digest=sha256_hex(f"declared:{declared}"))

    @property
    def short(self) -> str:
        """The first 12 hex digits, for listings."""
        return self.digest[:12]

    def changes(self, saved: Fingerprint) -> list[str]:
        """What changed from ``saved`` to this one, one phrase each (empty when equal)."""
        if self.digest == saved.digest:
            return []
        if self.rows is None or saved.rows is None:
            return [f"the source's declared fingerprint changed ({saved.short} -> {self.short})"]
        out: list[str] = []
        if self.rows > saved.rows:
            out.append(f"rows added ({saved.rows} -> {self.rows} rows)")
        elif self.rows < saved.rows:
            out.append(f"rows removed ({saved.rows} -> {self.rows} rows)")
        elif self.rows_set == saved.rows_set and self.rows_ordered != saved.rows_ordered:
            out.append(f"row order changed (the same {self.rows} rows in another order)")
        elif self.rows_ordered != saved.rows_ordered:
            out.append(f"row content changed (still {self.rows} rows, some edited)")
        out += _key_changes("preprocessing key", saved.preprocessing, self.preprocessing)
        out += _key_changes("archive", dict(saved.archives), dict(self.archives), what="size")
        return out or [f"the fingerprint changed ({saved.short} -> {self.short})"]

    def to_payload(self) -> dict[str, Any]:
        """The ``weights_only``-safe payload stored with the cursor."""
        return {
            "version": FINGERPRINT_VERSION,
            "digest": self.digest,
            "rows": self.rows,
            "rows_ordered": self.rows_ordered,
            "rows_set": self.rows_set,
            "preprocessing": canonical_json(self.preprocessing),
            "archives": [[path, size] for path, size in self.archives],
        }

    @classmethod
    def from_payload(cls, payload: object) -> tuple[Fingerprint | None, list[str]]:
        """The fingerprint in ``payload``, or ``None`` and the problem lines."""
        if not isinstance(payload, dict):
            return None, [f"expected a dict; got {type(payload).__name__}"]
        problems = [f"unexpected key {k!r}" for k in payload if k not in _KEYS]
        if payload.get("version") != FINGERPRINT_VERSION:
            got = payload.get("version")
            problems.append(f"version: expected {FINGERPRINT_VERSION}; got {got!r}")
        digest = payload.get("digest")
        if not isinstance(digest, str) or not digest:
            problems.append(f"digest: expected a hex str; got {digest!r}")
        rows = payload.get("rows")
        if rows is not None and (type(rows) is not int or rows < 0):
            problems.append(f"rows: expected an int >= 0 or None; got {rows!r}")
        for key in ("rows_ordered", "rows_set"):
            if payload.get(key) is not None and not isinstance(payload.get(key), str):
                problems.append(f"{key}: expected a str or None; got {payload.get(key)!r}")
        settings: Any = None
        try:
            settings = json.loads(payload.get("preprocessing", ""))
        except (TypeError, ValueError):
            pass
        if not isinstance(settings, dict):
            problems.append("preprocessing: expected the canonical JSON of a dict")
        archives = payload.get("archives")
        good = isinstance(archives, list) and all(
            isinstance(a, list) and len(a) == 2 and isinstance(a[0], str) and type(a[1]) is int
            for a in archives
        )
        if not good:
            problems.append("archives: expected a list of [relative path, size]")
        if problems:
            return None, problems
        assert isinstance(archives, list)
        assert isinstance(settings, dict)
        return cls(
            digest=str(digest),
            rows=rows,
            rows_ordered=payload.get("rows_ordered"),
            rows_set=payload.get("rows_set"),
            preprocessing=settings,
            archives=tuple((str(a[0]), int(a[1])) for a in archives),
        ), []


def _key_changes(
    label: str, saved: Mapping[str, Any], live: Mapping[str, Any], what: str = ""
) -> list[str]:
    """One phrase per key added, removed or changed between ``saved`` and ``live``."""
    out = []
    noun = f" {what}" if what else ""
    for key in sorted(set(saved) | set(live)):
        if key not in saved:
            out.append(f"{label} {key!r} added ({live[key]!r})")
        elif key not in live:
            out.append(f"{label} {key!r} removed (was {saved[key]!r})")
        elif canonical_json(saved[key]) != canonical_json(live[key]):
            out.append(f"{label} {key!r}{noun} changed ({saved[key]!r} -> {live[key]!r})")
    return out
