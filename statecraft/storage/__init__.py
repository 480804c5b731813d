"""Stores: the swappable I/O effects checkpoint bindings act through."""

from statecraft.storage.base import AtomicWriter, FileRecord, Store, check_relative_path
from statecraft.storage.filesystem import FileStat, Filesystem, OsFilesystem
from statecraft.storage.local import LocalStore, is_temporary_name
from statecraft.storage.objects import (
    BucketClient,
    ObjectInfo,
    ObjectRequestError,
    ObjectStore,
    PreconditionFailed,
    SimBucket,
)
from statecraft.storage.sim import CrashKind, SimWorld
from statecraft.storage.simfs import LossChoice, PendingOp, SimFilesystem

__all__ = [
    "AtomicWriter",
    "BucketClient",
    "CrashKind",
    "FileRecord",
    "FileStat",
    "Filesystem",
    "LocalStore",
    "LossChoice",
    "ObjectInfo",
    "ObjectRequestError",
    "ObjectStore",
    "OsFilesystem",
    "PendingOp",
    "PreconditionFailed",
    "SimBucket",
    "SimFilesystem",
    "SimWorld",
    "Store",
    "check_relative_path",
    "is_temporary_name",
]
