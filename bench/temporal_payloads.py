"""Temporal's large payloads: its own S3 driver beside `StashStorageDriver`, in one run.

Both drivers on SeaweedFS behind the latency proxy (15 ms a request; requests, rounds and
bytes sent counted): 20 JSON payloads of ~300 KB stored for one workflow, each stored
again (a retried workflow task), then all retrieved. Temporal's driver runs over a small
aiobotocore client of the `S3StorageDriverClient` interface it documents (its aioboto3
client pins an older aiobotocore than the stash's).

    .venv/bin/python -m bench.temporal_payloads
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

import stashpoint
from bench.common import started_servers
from bench.langgraph_lambda_bench import _text
from bench.latency_proxy import Counts, LatencyProxy
from stashpoint.temporal import StashStorageDriver
from tests.servers import VERSIONED_BUCKET

CONTEXT = StorageDriverStoreContext(
    target=StorageDriverWorkflowInfo(namespace="default", id="bench-wf", type="Bench")
)


class AiobotocoreClient(S3StorageDriverClient):
    """Temporal's `S3StorageDriverClient` over an aiobotocore S3 client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        await self.client.put_object(Bucket=bucket, Key=key, Body=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        try:
            await self.client.head_object(Bucket=bucket, Key=key)
        except self.client.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        answer = await self.client.get_object(Bucket=bucket, Key=key)
        async with answer["Body"] as body:
            data: bytes = await body.read()
            return data


def payloads(count: int) -> list[Payload]:
    """`count` JSON payloads of ~300 KB (a document an activity passes on)."""
    return [
        Payload(
            metadata={"encoding": b"json/plain"},
            data=json.dumps({"n": n, "pages": [_text(n * 150 + p) for p in range(150)]}).encode(),
        )
        for n in range(count)
    ]


async def measure(driver: Any, items: list[Payload], counts: Counts) -> dict[str, float]:
    """Store, store again, retrieve; per payload requests, KB sent, and rounds."""
    counts.reset()
    claims = [(await driver.store(CONTEXT, [p]))[0] for p in items]
    stored = (counts.requests / len(items), counts.sent / len(items) / 1024)
    counts.reset()
    for p in items:
        await driver.store(CONTEXT, [p])
    again = counts.requests / len(items)
    counts.reset()
    back = await driver.retrieve(StorageDriverRetrieveContext(), claims)
    assert back == items
    return {
        "store": stored[0], "kb": stored[1], "again": again,
        "retrieve": counts.requests / len(items), "rounds": counts.rounds,
    }  # fmt: skip


async def run(count: int, latency: float) -> None:
    """Run both drivers; print the table."""
    from aiobotocore.session import get_session

    items = payloads(count)
    raw = sum(p.ByteSize() for p in items) / len(items) / 1024
    counts = Counts()
    with started_servers() as (s3, _), LatencyProxy(s3.endpoint, latency, counts) as proxy:
        async with get_session().create_client(
            "s3", endpoint_url=proxy.endpoint, region_name="us-east-1"
        ) as client:
            theirs = await measure(
                S3StorageDriver(AiobotocoreClient(client), VERSIONED_BUCKET), items, counts
            )
        url = s3.url(f"temporal-{uuid.uuid4().hex[:8]}", endpoint=proxy.endpoint)
        async with stashpoint.open_async(url) as stash:
            ours = await measure(StashStorageDriver(stash), items, counts)
    print(f"\nTemporal payloads: {count} JSON payloads of {raw:.0f} KB, 15 ms a request")
    print("| driver | requests/store | KB sent/store | requests/store again | "
          "requests/retrieve | retrieve rounds (all at once) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for kind, r in (("S3StorageDriver (Temporal)", theirs), ("StashStorageDriver", ours)):
        print(f"| {kind} | {r['store']:.2f} | {r['kb']:.1f} | {r['again']:.2f} "
              f"| {r['retrieve']:.2f} | {r['rounds']:.0f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--payloads", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.015)
    args = parser.parse_args(argv)
    asyncio.run(run(args.payloads, args.latency))


if __name__ == "__main__":
    main()
