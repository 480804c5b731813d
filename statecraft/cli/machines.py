"""``statecraft machines check``, ``statecraft machines draw NAME`` and
``statecraft machines table``.

All act on a machines directory (``--machines-dir``, default: the shipped ``machines/``) and
``check`` and ``table`` on a specs directory too (``--specs-dir``, default: the shipped
``specs/``): the transactions are the tables found there, nothing is listed by hand.
``table`` prints the markdown table of ``docs/machines.md`` (between its
:data:`TABLE_BEGIN` / :data:`TABLE_END` markers; ``tests/cli/test_cli.py`` keeps them equal).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from statecraft.cli.envelope import emit
from statecraft.errors import StatecraftError

__all__ = [
    "TABLE_BEGIN",
    "TABLE_END",
    "check_transactions",
    "machines_table",
    "resolve_dirs",
    "run_machines_check",
    "run_machines_draw",
    "run_machines_table",
]

#: the markers around the generated table in ``docs/machines.md``
TABLE_BEGIN = "<!-- begin: statecraft machines table -->"
TABLE_END = "<!-- end: statecraft machines table -->"
_TABLE_COLUMNS = ("machine", "table", "bindings", "contract", "diagram")


def resolve_dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    """The machines and specs directories an invocation names (shipped ones by default).

    Raises:
        StatecraftError: a named directory does not exist.
    """
    from statecraft import resources

    machines = getattr(args, "machines_dir", None)
    specs = getattr(args, "specs_dir", None)
    out = []
    for given, default, flag in (
        (machines, resources.machines_dir, "--machines-dir"),
        (specs, resources.specs_dir, "--specs-dir"),
    ):
        path = Path(given) if given else default()
        if not path.is_dir():
            raise StatecraftError(f"{flag} {path} is not a directory; pass an existing one")
        out.append(path)
    return out[0], out[1]


def check_transactions(machines_dir: Path, specs_dir: Path) -> tuple[dict[str, Any], list]:
    """Check every table of ``machines_dir`` (shape, graph, bindings) and its spec in
    ``specs_dir`` against it (:func:`statecraft.engine.contract_problems`).

    Returns:
        ``(data, errors)``: per machine its paths, problems, states and transitions; and the
        ``(code, message)`` error pairs of the envelope.
    """
    from statecraft.engine import contract_problems, load_spec, load_table, table_problems
    from statecraft.engine.registry import load_bindings, transaction_names

    data: dict[str, Any] = {}
    errors: list[tuple[str, str]] = []
    names = transaction_names(machines_dir)
    for name in names:
        path = machines_dir / f"{name}.toml"
        spec_path = specs_dir / f"{name}.toml"
        table_errors: list[str] = []
        spec_errors: list[str] = []
        table = None
        uncaught: tuple[str, ...] = ()
        try:
            table = load_table(path)
            table_errors = table_problems(table, load_bindings(table))
        except StatecraftError as exc:
            table_errors = [str(exc)]
        if not spec_path.is_file():
            spec_errors.append(
                f"{spec_path}: machine {name!r} has no contract; write {spec_path.name} in "
                f"{specs_dir} (docs/specs.md)"
            )
        elif table is not None:
            try:
                spec = load_spec(spec_path)
                spec_errors = contract_problems(table, spec)
                uncaught = spec.uncaught()
            except StatecraftError as exc:
                spec_errors = [str(exc)]
        if uncaught and not spec_errors:
            spec_errors = [
                f"{spec_path}: no [[broken]] variant catches {', '.join(uncaught)}: a guarantee "
                "whose check was never shown able to fail proves nothing; declare a "
                "deliberately wrong variant that violates it (docs/durability.md)"
            ]
        errors.extend(("machine_definition", f"{path}: {p}") for p in table_errors)
        errors.extend(("spec_definition", p) for p in spec_errors)
        data[name] = {
            "path": str(path),
            "spec": str(spec_path),
            "problems": table_errors + spec_errors,
            "states": len(table.states) if table else None,
            "transitions": len(table.transitions) if table else None,
            "without_broken_variant": list(uncaught),
        }
    for orphan in sorted(p for p in specs_dir.glob("*.toml") if p.stem not in names):
        problem = (
            f"{orphan}: covers machine {orphan.stem!r} but {machines_dir / orphan.name} does "
            "not exist; add the table or remove the spec"
        )
        errors.append(("spec_definition", problem))
        data[orphan.stem] = {"path": None, "spec": str(orphan), "problems": [problem]}
    return data, errors


def run_machines_check(args: argparse.Namespace) -> int:
    machines_dir, specs_dir = resolve_dirs(args)
    data, errors = check_transactions(machines_dir, specs_dir)
    lines = []
    for name, entry in data.items():
        if entry["problems"]:
            lines.append(f"FAIL {name} ({entry['path'] or entry['spec']})")
            lines.extend(f"  - {p}" for p in entry["problems"])
        else:
            lines.append(
                f"ok   {name}: {entry['states']} states, {entry['transitions']} transitions, "
                f"contract {entry['spec']} ({entry['path']})"
            )
            if entry.get("without_broken_variant"):
                lines.append(
                    f"     unproven: no broken variant catches "
                    f"{', '.join(entry['without_broken_variant'])}"
                )
    return emit(
        "machines check",
        as_json=args.json,
        data=data,
        errors=errors,
        exit_code=1 if errors else 0,
        text="\n".join(lines),
    )


def run_machines_draw(args: argparse.Namespace) -> int:
    from statecraft.engine import load_table, render_mermaid
    from statecraft.engine.registry import transaction_names

    machines_dir, _ = resolve_dirs(args)
    path = machines_dir / f"{args.name}.toml"
    if not path.exists():
        return emit(
            "machines draw",
            as_json=args.json,
            exit_code=2,
            errors=[
                (
                    "unknown_machine",
                    f"no machine {args.name!r}; shipped: "
                    f"{', '.join(transaction_names(machines_dir))}",
                )
            ],
        )
    diagram = render_mermaid(load_table(path))
    return emit(
        "machines draw",
        as_json=args.json,
        data={"name": args.name, "mermaid": diagram},
        text=diagram,
    )


def machines_table(
    machines_dir: Path, specs_dir: Path
) -> tuple[list[dict[str, str]], list[tuple[str, str]]]:
    """One row per table of ``machines_dir``, sorted by name: its table file, its bindings
    module's file (as its dotted name spells it), its contract in ``specs_dir`` and its diagram,
    as the repository lays them out (``machines/``, ``specs/``, ``docs/diagrams/``).

    Returns:
        ``(rows, errors)``: the rows of the tables that load, and an envelope error pair
        (``machine_definition``) naming each table that does not, and why.
    """
    from statecraft.engine import load_table
    from statecraft.engine.registry import transaction_names

    rows: list[dict[str, str]] = []
    errors: list[tuple[str, str]] = []
    for name in transaction_names(machines_dir):
        try:
            table = load_table(machines_dir / f"{name}.toml")
        except StatecraftError as exc:
            errors.append(("machine_definition", str(exc)))
            continue
        bindings = table.bindings.replace(".", "/") + ".py" if table.bindings else "(none)"
        has_spec = (specs_dir / f"{name}.toml").is_file()
        rows.append(
            {
                "machine": name,
                "table": f"machines/{name}.toml",
                "bindings": bindings,
                "contract": f"specs/{name}.toml" if has_spec else "(none)",
                "diagram": f"diagrams/{name}.mmd",
            }
        )
    return rows, errors


def _markdown(rows: list[dict[str, str]]) -> str:
    lines = ["| " + " | ".join(_TABLE_COLUMNS) + " |", "|---" * len(_TABLE_COLUMNS) + "|"]
    for row in rows:
        diagram = row["diagram"]
        cells = [
            row["machine"],
            f"`{row['table']}`",
            f"`{row['bindings']}`",
            f"`{row['contract']}`",
            f"[{diagram.rsplit('/', 1)[-1]}]({diagram})",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_machines_table(args: argparse.Namespace) -> int:
    """Print the markdown table of the transactions (``--json``: the rows and the markdown);
    exit 1 when a table does not load (it is left out and named in the errors)."""
    machines_dir, specs_dir = resolve_dirs(args)
    rows, errors = machines_table(machines_dir, specs_dir)
    markdown = _markdown(rows)
    return emit(
        "machines table",
        as_json=args.json,
        data={"machines": rows, "markdown": markdown},
        errors=errors,
        exit_code=1 if errors else 0,
        text=markdown,
    )
