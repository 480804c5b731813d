"""Fixtures shared by test modules."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkpoint_runs import private_copy
from s3_server import S3Server


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the requesting module's ``pristine`` output root, free to damage."""
    return private_copy(pristine, tmp_path)


#: the signals a TerminationWatch may handle (termination.signals)
_TERMINATION_SIGNALS = (
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
)
#: their handlers when the test session started
_SESSION_HANDLERS = {number: signal.getsignal(number) for number in _TERMINATION_SIGNALS}


@pytest.fixture(autouse=True)
def _restore_signal_handlers() -> Iterator[None]:
    """A Checkpointer resumed and never finalized or closed (in a test, or in a module-scoped
    fixture) leaves its flag-only handlers installed: after each test put the session's
    handlers back, so the next test starts clean and a SIGTERM (a CI cancel) still ends the
    test process."""
    yield
    for number, handler in _SESSION_HANDLERS.items():
        if handler is not None and signal.getsignal(number) is not handler:
            signal.signal(number, handler)


#: the size of the real tmpfs the disk-full tests fill
TMPFS_BYTES = 4 << 20


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB tmpfs mounted for the test (skipped where mounting is not permitted)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the fault-injection tests cover the path")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here ({done.stderr.strip()})")
    try:
        yield mount
    finally:
        # A descriptor still open on the mount (a writer lock of this process) makes a plain
        # umount fail with "busy"; the lazy unmount detaches it anyway, so no mount outlives
        # the test (a left mount would make the temporary directory unremovable).
        if subprocess.run(["umount", str(mount)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real SeaweedFS S3 server for the session (bucket ``ckpt-bucket``), stopped at the
    end (SIGTERM, then SIGKILL by PID)."""
    server = S3Server(tmp_path_factory.mktemp("s3-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
