"""``statecraft inspect`` shows each archive receipt: a v1 receipt's destination URI and file
count, a one-line marker as legacy (binds no destination), a damaged one as malformed; never a
key id or a secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from checkpoint_runs import RUN, open_checkpointer, train

from statecraft.checkpoint.archive.destination import ArchiveDestination
from statecraft.checkpoint.archive.upload_bindings import upload_checkpoint
from statecraft.cli import main
from statecraft.storage.local import LocalStore
from statecraft.storage.objects import SimBucket


def test_inspect_shows_receipts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """iter_2 archived (SimBucket), iter_4 a legacy one-liner, iter_6 a damaged receipt: the
    text names each as such, and --json carries the archive field of every iteration."""
    ckpt, objects = open_checkpointer(tmp_path)
    ckpt.resume()
    train(ckpt, objects, 6)
    ckpt.finalize()
    ckpt.close()
    attempt = next(p for p in RUN.job_dir(tmp_path).iterdir() if p.is_dir())
    root = attempt / "checkpoints"
    store = LocalStore(str(root))
    upload_checkpoint(store, 2, ArchiveDestination(SimBucket(), "p/checkpoints"))
    (root / "iter_000000004" / ".uploaded").write_text("uploaded\n")
    (root / "iter_000000006" / ".uploaded").write_text('{"schema": "statecraft.archive-ma')
    assert main(["inspect", str(attempt)]) == 0
    text = capsys.readouterr().out
    assert "checkpoint archived at s3://sim-bucket/p/checkpoints/iter_000000002 (5 files)" in text
    assert "legacy marker (binds no destination)" in text
    assert "(upload marker: malformed)" in text
    main(["inspect", str(attempt), "--json"])
    out = capsys.readouterr().out
    found = {r["name"]: r["archive"] for r in _records(json.loads(out))}
    assert found["iter_000000002"]["status"] == "uploaded"
    assert found["iter_000000002"]["files"] == 5
    assert found["iter_000000004"]["status"] == "legacy"
    assert found["iter_000000006"]["status"] == "malformed"


def _records(node: Any) -> list[dict[str, Any]]:
    """Every report record (a dict with ``archive`` and ``name``) in the JSON output."""
    if isinstance(node, dict):
        here = [node] if "archive" in node and "name" in node else []
        return here + [r for v in node.values() for r in _records(v)]
    if isinstance(node, list):
        return [r for v in node for r in _records(v)]
    return []
