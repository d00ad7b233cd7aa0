"""Shared test fixtures: real folders, real servers (see `servers.py`), moto for unit tests."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.retries.standard import ExponentialBackoff
from hypothesis import HealthCheck, settings

from tests import servers, zygote

pytest_plugins = ["moto_fixtures.plugin"]

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Tests never reach a real AWS account: fixed fake credentials, a fixed region.
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
              "AWS_ENDPOINT_URL_DYNAMODB", "STASHPOINT_URL"):  # fmt: skip
    os.environ.pop(_name, None)
os.environ["AWS_ACCESS_KEY_ID"] = servers.ACCESS_KEY
os.environ["AWS_SECRET_ACCESS_KEY"] = servers.SECRET_KEY
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"

# botocore (standard and legacy retries alike, with new retries off) waits 0-1 s, then 0-2 s,
# before resending a request that failed: a dropped connection, a 503 SlowDown. The fault
# proxy fails a few percent of requests, so the write-path matrices spent most of their time
# asleep in botocore (187 s of sleep over the three `test_s3` fault-proxy tests). What they
# test is that faults lose and repeat nothing, not botocore's pacing: its waits are scaled to
# a twentieth here (0-50 ms, then 0-100 ms), still long beside a request to a local server,
# so a resending thread still falls behind the others.
_botocore_delay = ExponentialBackoff.delay_amount
ExponentialBackoff.delay_amount = lambda self, context: _botocore_delay(self, context) / 20  # type: ignore[method-assign]


_SHARED_SERVERS = pytest.StashKey[servers.SharedServers]()
_SHARED_ZYGOTE = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller starts the servers once, for every worker (`SharedServers`)."""
    controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(
        config, "workerinput"
    )
    already = {"STASHPOINT_TEST_S3_ENDPOINT", "STASHPOINT_TEST_DYNAMODB_ENDPOINT"} & set(os.environ)
    if controller and not already and not config.option.collectonly:
        folder = Path(tempfile.mkdtemp(prefix="stashpoint-servers-"))
        config.stash[_SHARED_SERVERS] = servers.SharedServers(folder)
        # One warm interpreter the workers' kill children fork from (`tests.zygote`).
        if zygote.SHARED not in os.environ and (started := zygote.start_shared()):
            config.stash[_SHARED_ZYGOTE] = started


def pytest_unconfigure(config: pytest.Config) -> None:
    if shared := config.stash.get(_SHARED_SERVERS, None):
        shared.stop()
    if warm := config.stash.get(_SHARED_ZYGOTE, None):
        warm.close()


@pytest.fixture
def memory_url() -> tuple[str, dict[str, Any]]:
    """A fresh named in-process stash (with an in-memory SQLite index)."""
    return f"memory://test-{uuid.uuid4().hex}", {}


@pytest.fixture
def local_url(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A fresh local folder stash (with its SQLite index), fsync off.

    No test here loses power, and a killed process loses nothing the kernel has: what
    fsync adds is tested where it is under test (`tests/stores/test_local_crashes.py`
    crashes at each fsync; `local_fsync_url`).
    """
    return f"local://{tmp_path / 'stash'}?fsync=false", {}


@pytest.fixture
def local_encrypted_url(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A local folder stash whose every object is sealed (client-side encryption, keyring).

    Two tenants and the catch-all, so the contract suites cross tenant keys too.
    """
    from stashpoint.encryption import Encryption

    encryption = Encryption.local(tmp_path / "keyring.json", ("one", "t1"), ("runs", "r"))
    return f"local://{tmp_path / 'stash'}?fsync=false", {"encryption": encryption}


@pytest.fixture
def local_fsync_url(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A fresh local folder stash with fsync on (the default users get)."""
    return f"local://{tmp_path / 'stash'}", {}


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.S3Server]:
    """A real SeaweedFS S3 server on 127.0.0.1 for the whole session."""
    server = servers.start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        servers.stop(server)


@pytest.fixture
def s3_seaweed_url(seaweedfs: servers.S3Server) -> tuple[str, dict[str, Any]]:
    """A fresh prefix in the versioned SeaweedFS bucket."""
    return seaweedfs.url(f"t-{uuid.uuid4().hex}"), {}


@pytest.fixture
def s3_moto_url() -> Iterator[tuple[str, dict[str, Any]]]:
    """A versioned bucket on moto in-process (sync driver only)."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="moto-bucket")
        client.put_bucket_versioning(
            Bucket="moto-bucket", VersioningConfiguration={"Status": "Enabled"}
        )
        yield f"s3://moto-bucket/p-{uuid.uuid4().hex[:8]}", {}


@pytest.fixture(scope="session")
def dynamodb_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.DynamoDBServer]:
    """AWS DynamoDB Local on 127.0.0.1 for the whole session."""
    server = servers.start_dynamodb_local(tmp_path_factory.mktemp("dynamodb"))
    try:
        yield server
    finally:
        servers.stop(server)


@pytest.fixture
def dynamodb_table(dynamodb_local: servers.DynamoDBServer) -> str:
    """A fresh index table on DynamoDB Local, created from the library's schema."""
    from stashpoint._backends.dynamodb import create_table

    name = f"idx-{uuid.uuid4().hex[:12]}"
    create_table(dynamodb_local.client(), name)
    return name


@pytest.fixture
def s3_dynamo_url(
    seaweedfs: servers.S3Server, dynamodb_local: servers.DynamoDBServer, dynamodb_table: str
) -> tuple[str, dict[str, Any]]:
    """S3 on SeaweedFS with its index on DynamoDB Local: the production shape, for real."""
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}") + f"&index=dynamodb://{dynamodb_table}"
    return url, {"index_endpoint_url": dynamodb_local.endpoint}


@pytest.fixture(scope="session")
def directory_bucket(seaweedfs: servers.S3Server) -> Iterator[str]:
    """The directory-bucket stand-in (`tests/directory_proxy.py`) in front of SeaweedFS."""
    from tests.directory_proxy import DirectoryBucketProxy

    with DirectoryBucketProxy(seaweedfs.endpoint) as proxy:
        yield proxy.endpoint


@pytest.fixture
def s3_directory_url(
    seaweedfs: servers.S3Server, directory_bucket: str
) -> tuple[str, dict[str, Any]]:
    """A prefix of the unversioned bucket seen as a directory bucket: unordered listings, no
    StartAfter, no versions, opaque ETags (`provider=s3express`)."""
    prefix = f"t-{uuid.uuid4().hex}"
    url = seaweedfs.url(prefix, servers.UNVERSIONED_BUCKET, endpoint=directory_bucket)
    return url + "&provider=s3express", {}


@pytest.fixture
def s3_directory_dynamo_url(
    s3_directory_url: tuple[str, dict[str, Any]],
    dynamodb_local: servers.DynamoDBServer,
    dynamodb_table: str,
) -> tuple[str, dict[str, Any]]:
    """The directory-bucket stand-in with its index on DynamoDB Local."""
    url = s3_directory_url[0] + f"&index=dynamodb://{dynamodb_table}"
    return url, {"index_endpoint_url": dynamodb_local.endpoint}


@pytest.fixture(params=["local", "seaweed-versioned", "seaweed-unversioned"])
def erasure_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh stash on each backend a purge's sweep behaves differently on: a local folder,
    and SeaweedFS with and without versioning (deletes of versions vs of current objects)."""
    if request.param == "local":
        return f"local://{tmp_path / 'stash'}"
    seaweedfs = request.getfixturevalue("seaweedfs")
    bucket = (
        servers.VERSIONED_BUCKET
        if request.param == "seaweed-versioned"
        else servers.UNVERSIONED_BUCKET
    )
    return str(seaweedfs.url(f"t-{uuid.uuid4().hex}", bucket))


@pytest.fixture
def locked_bucket() -> Any:
    """A moto bucket with S3 Object Lock enabled (`s3://locked-bucket/...`)."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="locked-bucket", ObjectLockEnabledForBucket=True)
        yield client


@pytest.fixture
def retained_bucket(locked_bucket: Any) -> Any:
    """`locked_bucket` with a default retention: every new version kept 30 days (governance)."""
    locked_bucket.put_object_lock_configuration(
        Bucket="locked-bucket",
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 30}},
        },
    )
    return locked_bucket
