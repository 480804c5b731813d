"""Fixtures shared by test modules."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkpoint_runs import private_copy
from s3_proxy import FaultProxy
from s3_server import S3Server
from secret_guard import RecordCollector, files_with_secret, leaks


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


@pytest.fixture(scope="module")
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the session's S3 server, one per module, closed at
    the module's end."""
    proxy = FaultProxy(s3_server.s3_port)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def clean_proxy(proxy: FaultProxy) -> Iterator[FaultProxy]:
    """The module's proxy with no fault injected and no request recorded, before and after."""
    proxy.clear()
    yield proxy
    proxy.clear()


#: the loggers the secret guard raises to DEBUG while an S3 test runs (the rest: INFO)
_GUARD_DEBUG_LOGGERS = ("statecraft",)


@pytest.fixture(autouse=True)
def _s3_secret_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test that talks to the session S3 server: no log record, no file under its
    ``tmp_path`` holds the server's secret key (tests/secret_guard.py). Captured output and
    failure reports are checked by :func:`pytest_runtest_makereport`."""
    if "s3_server" not in request.fixturenames:
        yield
        return
    server: S3Server = request.getfixturevalue("s3_server")
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    collector = RecordCollector()
    root = logging.getLogger()
    raised = {name: logging.getLogger(name).level for name in _GUARD_DEBUG_LOGGERS}
    old_root_level = root.level
    root.addHandler(collector)
    root.setLevel(min(old_root_level or logging.WARNING, logging.INFO))
    for name in _GUARD_DEBUG_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(collector)
        root.setLevel(old_root_level)
        for name, level in raised.items():
            logging.getLogger(name).setLevel(level)
    found = leaks(server.secret_key, (("log record", t) for t in collector.texts))
    if tmp is not None:
        found += [f"file {p}" for p in files_with_secret(server.secret_key, tmp)]
    assert not found, f"the S3 secret key leaked into: {found}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """The secret guard's second half: an S3 test's captured stdout/stderr, log sections and
    failure report never hold the server's secret key."""
    outcome = yield
    report = outcome.get_result()
    if "s3_server" not in getattr(item, "fixturenames", ()):
        return
    server = getattr(item, "funcargs", {}).get("s3_server")
    if not isinstance(server, S3Server):
        return
    texts = [(f"captured {name}", content) for name, content in report.sections]
    texts.append(("failure report", str(report.longrepr or "")))
    found = leaks(server.secret_key, texts)
    if found:
        report.outcome = "failed"
        report.longrepr = f"the S3 secret key leaked into: {found}"


@pytest.fixture
def torch_determinism_restored() -> Iterator[None]:
    """In-process fits with ``deterministic=True`` (Lightning's Trainer flag) flip torch's
    global switch and set CUBLAS_WORKSPACE_CONFIG: put both back after the test."""
    import torch

    deterministic = torch.are_deterministic_algorithms_enabled()
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    yield
    torch.use_deterministic_algorithms(deterministic)
    if cublas is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
