"""Contracts checked against tables: does a spec fit the machine it claims to cover?

:func:`contract_problems` is what ``statecraft machines check`` runs for every transaction,
beside the table's own static checks. Each problem names the spec file, the guarantee or the
effect at fault, and the fix. The rules:

- the spec's ``machine`` is the table's ``name``, and the spec's file is ``<name>.toml``;
- every ``[[format.files]]`` entry's ``written_by`` is an effect of the table;
- every guarantee's ``check`` imports to a callable;
- every JSON schema a format file names is a valid JSON Schema;
- every guarantee is exercised: the spec's ``scenarios`` factory imports and returns at least
  one scenario, and the guarantee selects at least one phase (``at``) and at least one crash
  kind the explorer applies (``kinds``). This is the static half; ``statecraft crashcheck``
  supplies the dynamic half, failing any guarantee that ran zero checks over all scenarios
  (which also exposes a check that can never be reached).

The table's bindings (``bindings`` key, every name bound) are checked by
:func:`statecraft.engine.registry.load_bindings` and :func:`statecraft.engine.table_problems`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from statecraft.engine.registry import import_object, scenarios_factory
from statecraft.engine.schema import schema_problems
from statecraft.engine.spec import CRASH_KINDS, Spec
from statecraft.engine.table import MachineTable
from statecraft.errors import SpecError

__all__ = ["contract_problems"]


def contract_problems(
    table: MachineTable, spec: Spec, *, crash_kinds: Sequence[str] = CRASH_KINDS
) -> list[str]:
    """Every way ``spec`` does not fit ``table`` (empty when it fits).

    Args:
        table: the loaded table.
        spec: the loaded spec that should cover it.
        crash_kinds: the crash kinds the explorer applies (a guarantee limited to others is
            never exercised).

    Returns:
        One line per problem: ``<spec file>: <guarantee or effect>: <what is wrong>; <fix>``.
    """
    where = spec.source or "<spec>"
    problems: list[str] = []
    if spec.machine != table.name:
        problems.append(
            f"{where}: machine = {spec.machine!r} but the table {table.source} is named "
            f"{table.name!r}; set machine = {table.name!r}"
        )
    if spec.source and Path(spec.source).stem != table.name:
        problems.append(
            f"{where}: the spec of machine {table.name!r} must be named {table.name}.toml; "
            "rename the file"
        )
    effects = sorted(table.effect_names)
    for file in spec.files:
        if file.written_by not in table.effect_names:
            problems.append(
                f"{where}: format file {file.name!r}: written_by = {file.written_by!r} is not an "
                f"effect of {table.source} (effects: {', '.join(effects)}); name the effect "
                "that writes it"
            )
        if file.schema is not None:
            for problem in schema_problems(file.schema):
                problems.append(
                    f"{where}: format file {file.name!r}: schema {file.schema_file!r} is not a "
                    f"valid JSON Schema ({problem}); fix the schema file"
                )
    for guarantee in spec.guarantees:
        try:
            guarantee.resolve()
        except SpecError as exc:
            problems.append(f"{where}: {exc}; fix the check path (module:callable)")
        if not guarantee.at:
            problems.append(
                f"{where}: guarantee {guarantee.id}: at = [] selects no phase, so it is never "
                "checked; list 'crashed' and/or 'recovered'"
            )
        if not set(guarantee.kinds) & set(crash_kinds):
            problems.append(
                f"{where}: guarantee {guarantee.id}: kinds = {list(guarantee.kinds)} selects no "
                f"crash kind the explorer applies ({', '.join(crash_kinds)}), so it is never "
                "checked; list at least one of them"
            )
    problems.extend(_scenario_problems(spec, where))
    problems.extend(_broken_problems(spec, where))
    return problems


def _broken_problems(spec: Spec, where: str) -> list[str]:
    """A declared broken variant must import; a spec that declares any must declare one that
    catches each of its guarantees (``crashcheck --broken`` then proves each is caught). A
    spec that declares none is refused by ``machines check`` itself (every guarantee needs a
    variant: :func:`statecraft.cli.machines.check_transactions`), so that library callers can
    still check a draft contract here (docs/durability.md)."""
    problems: list[str] = []
    for broken in spec.broken:
        try:
            import_object(broken.variant, what="broken variant", source=where)
        except SpecError as exc:
            problems.append(str(exc))
    uncaught = spec.uncaught()
    if spec.broken and uncaught:
        problems.append(
            f"{where}: no [[broken]] variant catches {', '.join(uncaught)}: a guarantee whose "
            "check was never shown able to fail proves nothing; declare a deliberately wrong "
            "variant that violates it (docs/durability.md)"
        )
    return problems


def _scenario_problems(spec: Spec, where: str) -> list[str]:
    try:
        factory = scenarios_factory(spec)
    except SpecError as exc:
        return [str(exc)]
    try:
        scenarios = list(factory())
    except Exception as exc:
        return [
            f"{where}: the scenarios factory {spec.scenarios!r} raised {type(exc).__name__}: "
            f"{exc}; fix the factory"
        ]
    if not scenarios:
        ids = ", ".join(g.id for g in spec.guarantees)
        return [
            f"{where}: the scenarios factory {spec.scenarios!r} returned no scenario, so no "
            f"guarantee ({ids}) is exercised; return at least one scenario"
        ]
    return []
