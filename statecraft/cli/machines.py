"""``statecraft machines check`` and ``statecraft machines draw NAME``."""

from __future__ import annotations

import argparse
from typing import Any

from statecraft.cli.envelope import emit
from statecraft.errors import StatecraftError

__all__ = ["run_machines_check", "run_machines_draw"]


def run_machines_check(args: argparse.Namespace) -> int:
    from statecraft.checkpoint.machines import MACHINE_BINDINGS, shipped_machine_names
    from statecraft.engine import load_table, table_problems
    from statecraft.resources import machine_path

    data: dict[str, Any] = {}
    errors: list[tuple[str, str]] = []
    lines = []
    for name in shipped_machine_names():
        path = machine_path(name)
        try:
            table = load_table(path)
            bindings = MACHINE_BINDINGS[name]() if name in MACHINE_BINDINGS else None
            problems = table_problems(table, bindings)
            if bindings is None:
                problems.append(f"no bindings registered for machine {name!r}")
        except StatecraftError as exc:
            problems = [str(exc)]
            table = None
        data[name] = {
            "path": str(path),
            "problems": problems,
            "states": len(table.states) if table else None,
            "transitions": len(table.transitions) if table else None,
        }
        if problems:
            errors.extend(("machine_definition", f"{path}: {p}") for p in problems)
            lines.append(f"FAIL {name} ({path})")
            lines.extend(f"  - {p}" for p in problems)
        else:
            lines.append(
                f"ok   {name}: {data[name]['states']} states, "
                f"{data[name]['transitions']} transitions ({path})"
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
    from statecraft.resources import machine_path

    path = machine_path(args.name)
    if not path.exists():
        from statecraft.checkpoint.machines import shipped_machine_names

        return emit(
            "machines draw",
            as_json=args.json,
            exit_code=2,
            errors=[
                (
                    "unknown_machine",
                    f"no machine {args.name!r}; shipped: {', '.join(shipped_machine_names())}",
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
