"""Run ``statecraft bench save`` from a checkout: ``python benchmarks/bench_save.py [flags]``.

Every flag of ``statecraft bench save`` is accepted (``--size-mib``, ``--sizes``, ``--dir``,
``--repeat``, ``--json``); the measurement itself lives in :mod:`statecraft.cli.bench`.
"""

from __future__ import annotations

import sys

from statecraft.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "save", *sys.argv[1:]]))
