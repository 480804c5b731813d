"""What ``statecraft inspect`` reads the disk through: the read-only filesystem and the file
listing of one directory of a store."""

from __future__ import annotations

from pathlib import Path

from statecraft.cli.inspect.readonly import ReadOnlyFilesystem
from statecraft.storage.local import LocalStore

__all__ = ["FS", "file_records", "files_on_disk", "is_dir"]

FS = ReadOnlyFilesystem()  # every read of inspect goes through it; every write is refused


def is_dir(path: Path) -> bool:
    stat = FS.stat(str(path))
    return stat is not None and stat.is_dir


def files_on_disk(store: LocalStore, directory: str) -> dict[str, int]:
    """Relative path -> size of every file under store directory ``directory`` (sorted,
    recursive)."""
    found: dict[str, int] = {}
    pending = [""]
    while pending:
        below = pending.pop()
        for name in store.list(f"{directory}/{below}".rstrip("/")):
            relative = f"{below}/{name}" if below else name
            stat = store.stat(f"{directory}/{relative}")
            if stat is None:  # vanished meanwhile
                continue
            if stat.is_dir:
                pending.append(relative)
            else:
                found[relative] = stat.size
    return dict(sorted(found.items()))


def file_records(on_disk: dict[str, int], recorded: dict[str, int]) -> list[dict[str, object]]:
    """One record per file on disk or recorded in a manifest: ``name``, ``size`` (on disk,
    ``None`` when missing), ``recorded_size`` and ``in_manifest``."""
    return [
        {
            "name": name,
            "size": on_disk.get(name),
            "recorded_size": recorded.get(name),
            "in_manifest": name in recorded,
        }
        for name in sorted(set(on_disk) | set(recorded))
    ]
