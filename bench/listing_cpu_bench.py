"""The CPU of one 1,000-key S3 listing: botocore's timestamp parser against `iso_timestamp`.

A cold read of a long log lists every version ever written (keys are never freed): 1,000
keys at 200 LangGraph turns. botocore parses each key's `LastModified` with dateutil, in
Python. This bench writes `--keys` small objects to SeaweedFS (127.0.0.1), then lists them
`--samples` times with two clients made from the same botocore session setup, one with
botocore's default timestamp parser (the baseline) and one with stashpoint's
(`_backends.aws.with_fast_timestamps`), interleaved; process CPU, median.

    .venv/bin/python -m bench.listing_cpu_bench [--keys 1000] [--samples 9]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from bench.common import started_servers


def _client(endpoint: str, *, fast: bool) -> Any:
    import botocore.session
    from botocore.config import Config

    from stashpoint._backends.aws import with_fast_timestamps, with_shared_models

    session = with_shared_models(botocore.session.Session())
    if fast:
        with_fast_timestamps(session)
    return session.create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )  # fmt: skip


def main() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from tests import servers

    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=9)
    args = parser.parse_args()
    with started_servers() as (s3, _):
        bucket, prefix = servers.VERSIONED_BUCKET, f"listing-{uuid.uuid4().hex[:8]}/"
        writer = _client(s3.endpoint, fast=False)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(
                lambda n: writer.put_object(Bucket=bucket, Key=f"{prefix}{n:020d}", Body=b"x"),
                range(args.keys),
            ))  # fmt: skip
        clients = {"botocore": _client(s3.endpoint, fast=False),
                   "iso_timestamp": _client(s3.endpoint, fast=True)}  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in clients}
        for client in clients.values():  # a first call of each pays its lazy set-up
            client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        for _ in range(args.samples):
            for name, client in clients.items():
                started = time.process_time()
                found = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
                times[name].append(time.process_time() - started)
                assert found["KeyCount"] == min(args.keys, 1000)
        base = statistics.median(times["botocore"])
        print(f"one listing of {min(args.keys, 1000)} keys, median of {args.samples} (CPU)")
        for name, found in times.items():
            ms = statistics.median(found) * 1000
            print(f"{name}: {ms:.1f} ms ({ms / 1000 / base:.2f}x botocore's parser)")


if __name__ == "__main__":
    main()
