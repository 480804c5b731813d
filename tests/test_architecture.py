"""The shape of the code, pinned: no import cycle anywhere in statecraft/, no module over 400
lines, and every package says what it owns (docs/architecture.md is the map).

The layers themselves (cli over proofs over the domain; inside checkpoint/ the facade over the
capabilities over the services over the kernel over the trainer state, with the named
exceptions) are import-linter contracts in ``pyproject.toml``, run by CI (``lint-imports``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "statecraft"
MAX_LINES = 400

def import_cycles(package: str) -> list[list[str]]:
    """Every strongly connected component of more than one module in ``package``'s import graph
    (imports under ``TYPE_CHECKING`` and inside functions count: they are still arrows)."""
    graph = grimp.build_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(module: str) -> None:
        nonlocal counter
        index[module] = low[module] = counter
        counter += 1
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for module in sorted(graph.modules):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def test_no_import_cycle() -> None:
    """No two modules of statecraft import each other, directly or through others."""
    cycles = import_cycles("statecraft")
    assert cycles == [], "import cycles (break each one; grimp shows the arrows):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_over_the_limit() -> None:
    """Every module of statecraft/ has at most 400 lines: one job each."""
    over = {
        str(path.relative_to(REPO)): len(path.read_text().splitlines())
        for path in _modules()
        if len(path.read_text().splitlines()) > MAX_LINES
    }
    assert over == {}, f"split these modules (limit {MAX_LINES} lines): {over}"


def test_every_package_says_what_it_owns() -> None:
    """Each package's ``__init__`` opens with a docstring (what it owns, what it builds on)."""
    silent = sorted(
        str(init.relative_to(REPO))
        for init in PACKAGE.rglob("__init__.py")
        if ast.get_docstring(ast.parse(init.read_text())) is None
    )
    assert silent == [], f"write a docstring saying what the package owns: {silent}"
