"""Spec files: the contract of one machine, read by reviewers and executed by the harness.

Format (TOML, one file per machine in ``specs/``; documented in ``docs/specs.md``)::

    schema = "statecraft.spec.v1"
    machine = "save"
    scenarios = "statecraft.proofs.save.scenarios:save_scenarios"   # module:callable -> scenarios
    summary = "One paragraph: what the transaction promises."

    [[guarantees]]
    id = "SAVE-1"
    statement = "latest_checkpoint.txt names only a complete, verified checkpoint."
    check = "statecraft.proofs.save.checks:latest_names_complete"   # module:callable
    at = ["crashed", "recovered"]          # phases it must hold in (default: both)
    kinds = ["process_kill", "power_loss"] # crash kinds it applies to (default: all)

    [[broken]]                             # a deliberately wrong variant the harness must catch
    variant = "statecraft.proofs.save.broken:pointer_first"   # module:callable -> scenarios
    catches = ["SAVE-1"]                   # the guarantees its exploration must violate
    doc = "latest_checkpoint.txt written before the manifest is committed."

    [[format.files]]                       # the observable on-disk format
    name = "iter_<9 digits>/.posttrain-manifest.json"
    written_by = "commit_manifest"
    doc = "..."
    schema = "save.manifest.schema.json"   # optional JSON schema beside the spec

A check is called with the harness's check context and raises ``GuaranteeViolation`` (from
``statecraft.proofs``) when the guarantee does not hold.
"""

from __future__ import annotations

import importlib
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import attrs

from statecraft.engine.schema import JsonObject
from statecraft.errors import SpecError

__all__ = [
    "CRASH_KINDS",
    "PHASES",
    "BrokenVariant",
    "Check",
    "FormatFile",
    "Guarantee",
    "Spec",
    "load_spec",
]

#: A guarantee's check: called with the crash harness's check context, raises
#: ``GuaranteeViolation`` when the guarantee does not hold. ``Any``: that context is the proofs
#: layer's type, above the engine, which only imports the check and hands it over.
Check = Callable[[Any], None]

SPEC_SCHEMA = "statecraft.spec.v1"
PHASES = ("crashed", "recovered")
CRASH_KINDS = ("process_kill", "power_loss", "node_loss")


@attrs.frozen
class Guarantee:
    """One promise of a transaction and the check that proves it."""

    id: str
    statement: str
    check: str
    at: tuple[str, ...] = PHASES
    kinds: tuple[str, ...] = CRASH_KINDS

    def resolve(self) -> Check:
        """Import the check callable named by ``check`` (``module:attribute``).

        Raises:
            SpecError: the name is malformed or cannot be imported.
        """
        module_name, _, attr = self.check.partition(":")
        if not module_name or not attr:
            raise SpecError(f"guarantee {self.id}: check {self.check!r} must be 'module:callable'")
        try:
            module = importlib.import_module(module_name)
            func = getattr(module, attr)
        except (ImportError, AttributeError) as exc:
            raise SpecError(
                f"guarantee {self.id}: cannot import check {self.check!r}: {exc}"
            ) from None
        if not callable(func):
            raise SpecError(f"guarantee {self.id}: {self.check!r} is not callable")
        return cast(Check, func)  # callable; its signature is the spec's promise


@attrs.frozen
class FormatFile:
    """One file of the observable format.

    Attributes:
        name: the file's name pattern (``iter_<9 digits>/model.pt``).
        written_by: the effect of the machine's table that writes it.
        doc: how it is written and what it holds.
        schema: the parsed JSON schema, when ``schema_file`` names one.
        schema_file: the JSON schema's file name beside the spec (``save.manifest.schema.json``).
    """

    name: str
    written_by: str
    doc: str = ""
    schema: JsonObject | None = None
    schema_file: str | None = None


@attrs.frozen
class BrokenVariant:
    """A deliberately wrong variant of the transaction that the harness must catch.

    Attributes:
        variant: ``module:callable`` returning the scenarios that run the wrong variant.
        catches: the guarantees exploring those scenarios must report violated; a guarantee no
            variant catches is one whose check was never shown able to fail.
        doc: what is wrong in the variant.
    """

    variant: str
    catches: tuple[str, ...]
    doc: str = ""


@attrs.frozen
class Spec:
    """The contract of one machine.

    Attributes:
        machine: the table this spec covers (its file name is ``<machine>.toml`` too).
        summary: one paragraph of what the transaction promises.
        guarantees: the promises and their checks.
        files: the observable on-disk format.
        source: the spec file's path.
        scenarios: ``module:callable`` returning the crash scenarios that exercise the
            guarantees (``None``: the spec has none, which ``machines check`` reports).
        broken: the deliberately wrong variants that ``crashcheck --broken`` explores, each
            with the guarantees it must be caught violating.
    """

    machine: str
    summary: str
    guarantees: tuple[Guarantee, ...]
    files: tuple[FormatFile, ...] = ()
    source: str = ""
    scenarios: str | None = None
    broken: tuple[BrokenVariant, ...] = ()

    def uncaught(self) -> tuple[str, ...]:
        """The guarantees that no declared broken variant catches."""
        caught = {g for b in self.broken for g in b.catches}
        return tuple(g.id for g in self.guarantees if g.id not in caught)


def load_spec(path: str | Path) -> Spec:
    """Read and check the spec file at ``path``; every problem is reported at once.

    Raises:
        SpecError: the file is malformed, an id repeats, a phase or crash kind is unknown, a
            format file lacks ``written_by``, ``scenarios`` is not ``module:callable``, or a
            referenced JSON schema is missing or not JSON.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: cannot read spec: {exc}") from None
    problems: list[str] = []
    if data.get("schema") != SPEC_SCHEMA:
        problems.append(f"schema must be {SPEC_SCHEMA!r}, got {data.get('schema')!r}")
    machine = data.get("machine")
    if not isinstance(machine, str) or not machine:
        problems.append(f"machine must name the machine this spec covers, got {machine!r}")
    scenarios = data.get("scenarios")
    if scenarios is not None and (not isinstance(scenarios, str) or ":" not in scenarios):
        problems.append(
            f"scenarios must be 'module:callable' naming the scenarios factory, got {scenarios!r}"
        )
    guarantees: list[Guarantee] = []
    seen: set[str] = set()
    for i, raw in enumerate(data.get("guarantees", [])):
        where = f"guarantees[{i}]"
        missing = [k for k in ("id", "statement", "check") if not isinstance(raw.get(k), str)]
        if missing:
            problems.append(f"{where}: missing or non-string {missing}")
            continue
        if raw["id"] in seen:
            problems.append(f"{where}: id {raw['id']!r} repeats; ids must be unique")
        seen.add(raw["id"])
        at = tuple(raw.get("at", PHASES))
        kinds = tuple(raw.get("kinds", CRASH_KINDS))
        for value in at:
            if value not in PHASES:
                problems.append(f"{where} ({raw['id']}): phase {value!r} not in {PHASES}")
        for value in kinds:
            if value not in CRASH_KINDS:
                problems.append(f"{where} ({raw['id']}): crash kind {value!r} not in {CRASH_KINDS}")
        guarantees.append(Guarantee(raw["id"], raw["statement"], raw["check"], at, kinds))
    if not guarantees:
        problems.append("no [[guarantees]]; a spec must promise something")
    files: list[FormatFile] = []
    for i, raw in enumerate(data.get("format", {}).get("files", [])):
        schema = None
        written_by = raw.get("written_by")
        if not isinstance(written_by, str) or not written_by:
            problems.append(
                f"format.files[{i}] ({raw.get('name', '?')}): written_by must name the effect "
                f"of the table that writes the file, got {written_by!r}"
            )
        if "schema" in raw:
            schema_path = path.parent / raw["schema"]
            try:
                schema = json.loads(schema_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                problems.append(f"format.files[{i}]: cannot read schema {schema_path}: {exc}")
        files.append(
            FormatFile(
                str(raw.get("name", "?")),
                str(written_by),
                str(raw.get("doc", "")),
                schema,
                raw.get("schema"),
            )
        )
    broken = _broken_variants(data.get("broken", []), seen, problems)
    if problems:
        raise SpecError(f"{path}: invalid spec:\n" + "\n".join(f"  - {p}" for p in problems))
    return Spec(
        str(machine),
        str(data.get("summary", "")),
        tuple(guarantees),
        tuple(files),
        str(path),
        scenarios,
        broken,
    )


def _broken_variants(
    raws: list[dict[str, Any]], ids: set[str], problems: list[str]
) -> tuple[BrokenVariant, ...]:
    out: list[BrokenVariant] = []
    for i, raw in enumerate(raws):
        where = f"broken[{i}]"
        variant = raw.get("variant")
        catches = raw.get("catches")
        if not isinstance(variant, str) or ":" not in variant:
            problems.append(
                f"{where}: variant must be 'module:callable' returning the scenarios of the "
                f"wrong variant, got {variant!r}"
            )
            continue
        if not isinstance(catches, list) or not catches:
            problems.append(
                f"{where} ({variant}): catches must list the guarantees it violates, got "
                f"{catches!r}"
            )
            continue
        unknown = [g for g in catches if g not in ids]
        if unknown:
            problems.append(
                f"{where} ({variant}): catches names {unknown}, which are not guarantees of "
                "this spec; name ids of its [[guarantees]]"
            )
        out.append(BrokenVariant(variant, tuple(map(str, catches)), str(raw.get("doc", ""))))
    return tuple(out)
