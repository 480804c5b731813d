"""The ``statecraft`` command: one module per subcommand, one result envelope.

Production code never imports this package (pinned by the import contract in
``pyproject.toml``).
"""

from statecraft.cli.main import main

__all__ = ["main"]
