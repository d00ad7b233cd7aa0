"""A pytest plugin: a ready stashpoint stack on moto, bucket and index table included.

    # Installed with `stashpoint[test]`, the plugin loads itself (a pytest11 entry
    # point); otherwise list it in conftest.py: pytest_plugins = ["moto_fixtures.plugin"]

    def test_my_agent(stashpoint_moto):            # sync, moto in-process
        stashpoint_moto.runs.create_run("my-graph")

    @pytest.mark.asyncio
    async def test_my_lambda(stashpoint_moto_async):   # async, moto's server on 127.0.0.1
        await stashpoint_moto_async.runs.create_run("my-graph")

The bucket has versioning on and the table is created from the same schema definition the
library and `infra/` use. moto is for fast functional tests: its server loses updates under
concurrent conditional writes, so test concurrency against a real server instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

try:  # async fixtures need pytest-asyncio (in its default strict mode, its own decorator)
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover - the test extra installs it
    async_fixture = pytest.fixture

BUCKET = "stashpoint-moto"
"""The bucket the fixtures create."""
TABLE = "stashpoint-moto-index"
"""The index table the fixtures create."""


def _fake_credentials() -> None:
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(name, value)


def create_stack(
    endpoint_url: str | None = None, *, bucket: str = BUCKET, table: str = TABLE
) -> None:
    """Create the versioned bucket and the index table if missing (moto, or any endpoint)."""
    import boto3

    from stashpoint._backends.dynamodb import create_table

    kwargs: dict[str, Any] = {"region_name": "us-east-1"}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    s3 = boto3.client("s3", **kwargs)
    if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    dynamodb = boto3.client("dynamodb", **kwargs)
    if table not in dynamodb.list_tables().get("TableNames", []):
        create_table(dynamodb, table)


def stack_url(prefix: str, endpoint_url: str | None = None, *, bucket: str = BUCKET,
              table: str = TABLE) -> str:  # fmt: skip
    """The stash URL of the stack, optionally pointing both services at `endpoint_url`."""
    url = f"s3://{bucket}/{prefix}?index=dynamodb://{table}"
    if endpoint_url:
        url += f"&endpoint_url={endpoint_url}&index_endpoint_url={endpoint_url}"
    return url


@pytest.fixture
def stashpoint_moto() -> Iterator[Any]:
    """A `Stash` on moto in-process (mock_aws): S3 bucket plus DynamoDB index."""
    from moto import mock_aws

    import stashpoint

    _fake_credentials()
    with mock_aws():
        create_stack()
        with stashpoint.open(stack_url(f"t-{uuid.uuid4().hex[:8]}")) as stash:
            yield stash


@pytest.fixture(scope="session")
def stashpoint_moto_server() -> Iterator[str]:
    """moto in server mode on 127.0.0.1 (a random port), with the stack created: its URL."""
    from moto.server import ThreadedMotoServer

    _fake_credentials()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        create_stack(endpoint)
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def stashpoint_moto_url(stashpoint_moto_server: str) -> str:
    """A stash URL with a fresh prefix on the moto server (for subprocesses and the CLI)."""
    create_stack(stashpoint_moto_server)  # a mock_aws() elsewhere resets moto's shared state
    return stack_url(f"t-{uuid.uuid4().hex[:8]}", stashpoint_moto_server)


@async_fixture
async def stashpoint_moto_async(stashpoint_moto_url: str) -> AsyncIterator[Any]:
    """An `AsyncStash` on the moto server (aiobotocore needs a real HTTP endpoint)."""
    import stashpoint

    async with stashpoint.open_async(stashpoint_moto_url) as stash:
        yield stash
