"""The LangGraph store on Lambda: a cold `search` per process, each request a round trip.

Issue 52 #4. One namespace of `--items` memories (a small JSON value each), then, per store,
`--samples` cold `search(namespace, filter={"tag": "recent"}, limit=10)` calls (5 items
match; an equality, the filter both stores implement), **each in a new process**
(as a cold Lambda is). Every S3 and DynamoDB request goes through a latency proxy on
127.0.0.1 (`bench/latency_proxy.py`, `--latency` seconds before each request: 15 ms by
default) in front of SeaweedFS and DynamoDB Local. Stores, in the same run:

- `stashpoint`: `StashpointStore` on SeaweedFS, its namespace catalogued by one search
  before the samples (what any earlier search of the namespace leaves behind);
- `aws-dynamodb`: `langgraph_checkpoint_aws.DynamoDBStore` 1.2.6 on DynamoDB Local (one
  table, its `setup()`), when installed.

Per store and size: the median over the samples of the search's wall time and process CPU
(opening the store included, imports excluded) and its requests and rounds (counted at the
proxy: a request that arrives while none is in flight starts a round).

    .venv/bin/python -m bench.langgraph_store_lambda_bench [--items 100,100000] [--samples 5]

`--op namespaces --namespaces N`: the items are spread over N namespaces
(`("memories", "user-{i}")`) and each sample is a cold `list_namespaces(prefix=("memories",))`
instead; `stashpoint (every key)` is the same store on a profile without `any_delimiter`
(`provider=minio`: what it listed before, every item's key), measured beside it.

With `BENCH_PREIMPORT=1` stashpoint's lazily imported modules (the stash, its S3 backend)
are imported before the clock starts too, as the aws store's are by its import.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import started_servers
from bench.latency_proxy import Counts, LatencyProxy

NS = ("memories", "user-1")

_CHILD = r"""
import json, sys, time
kind, where, items, limit = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
from bench.langgraph_store_lambda_bench import open_store, NS
import stashpoint.langgraph, boto3  # imports first: a Lambda's init is measured apart
import os
if os.environ.get("BENCH_PREIMPORT"):  # stashpoint's lazy modules too (its S3 backend)
    import stashpoint.stash, stashpoint._backends.s3
try:
    import langgraph_checkpoint_aws
except ImportError:
    pass
wall, cpu = time.perf_counter(), time.process_time()
store, close = open_store(kind, where)
if where.get("namespaces"):
    found = store.list_namespaces(prefix=("memories",), limit=100_000)
    right = len(found) == int(where["namespaces"])
else:
    found = store.search(NS, filter={"tag": "recent"}, limit=limit)  # equality: both stores'
    right = sorted(i.key for i in found) == [f"k{n:06d}" for n in range(items - 5, items)]
result = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "right": right}
close()
print(json.dumps(result), flush=True)
"""


def open_store(kind: str, where: dict[str, str]) -> tuple[Any, Any]:
    """Open a store of `kind` at `where`; return it and its closer."""
    if kind.startswith("stashpoint"):
        import stashpoint
        from stashpoint.langgraph import StashpointStore

        every_key = "&provider=minio" if kind == "stashpoint (every key)" else ""
        stash = stashpoint.open(where["url"] + every_key)
        return StashpointStore(stash), stash.close
    if kind == "aws-dynamodb":
        from langgraph_checkpoint_aws import DynamoDBStore

        store = DynamoDBStore(
            where["table"], endpoint_url=where["dynamodb"], region_name="us-east-1"
        )
        return store, lambda: None
    raise ValueError(kind)


def _fill(kind: str, where: dict[str, str], items: int) -> None:
    """Put `items` memories, 16 writers at once, straight to the servers (no proxy)."""

    spread = int(where.get("namespaces") or 0)

    def part(first: int) -> None:
        store, close = open_store(kind, where)
        for n in range(first, items, 16):
            tag = "recent" if n >= items - 5 else "old"
            namespace = ("memories", f"user-{n % spread}") if spread else NS
            store.put(
                namespace, f"k{n:06d}", {"n": n, "tag": tag, "text": f"memory {n} of the user"}
            )
        close()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(part, range(16)))


def _child(
    kind: str, where: dict[str, str], items: int, limit: int, counts: Counts
) -> dict[str, Any]:
    counts.reset()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, kind, json.dumps(where), str(items), str(limit)],
        capture_output=True, text=True, cwd=Path(__file__).parent.parent, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{kind} search failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["requests"], result["rounds"] = counts.requests, counts.rounds
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", default="100,10000")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.015)
    parser.add_argument("--op", choices=["search", "namespaces"], default="search")
    parser.add_argument("--namespaces", type=int, default=100)
    args = parser.parse_args()
    import importlib.util

    spread = str(args.namespaces) if args.op == "namespaces" else ""
    kinds = ["stashpoint"] + (["stashpoint (every key)"] if spread else [])
    if importlib.util.find_spec("langgraph_checkpoint_aws") is not None:
        kinds.append("aws-dynamodb")
    counts = Counts()
    rows: list[tuple[int, str, dict[str, float]]] = []
    with (
        started_servers() as (s3, dynamo),
        LatencyProxy(s3.endpoint, args.latency, counts) as s3_proxy,
        LatencyProxy(dynamo.endpoint, args.latency, counts) as dynamo_proxy,
    ):
        for items in [int(n) for n in args.items.split(",")]:
            name = f"store-{items}-{uuid.uuid4().hex[:6]}"
            direct = {"url": s3.url(name), "table": name, "dynamodb": dynamo.endpoint,
                      "namespaces": spread}  # fmt: skip
            proxied = {"url": s3.url(name, endpoint=s3_proxy.endpoint), "table": name,
                       "dynamodb": dynamo_proxy.endpoint, "namespaces": spread}  # fmt: skip
            if "aws-dynamodb" in kinds:
                store, _ = open_store("aws-dynamodb", direct)
                store.setup()
            for kind in kinds:
                if kind != "stashpoint (every key)":  # the same objects as stashpoint's
                    _fill(kind, direct, items)
            store, close = open_store("stashpoint", direct)
            store.search(NS, limit=1)  # what an earlier search leaves: the catalog
            close()
            # The aws store applies `limit` to its one Query before it filters (and reads
            # no page past the first): with limit=10 it misses the matches; limit=items is
            # what a correct answer needs of it.
            runs = [(k, 10) for k in kinds]
            if not spread:
                runs += [(k, items) for k in kinds if not k.startswith("stashpoint")]
            samples: dict[tuple[str, int], list[dict[str, Any]]] = {run: [] for run in runs}
            for _ in range(args.samples):  # alternating: a drifting machine slows both alike
                for kind, limit in runs:
                    samples[(kind, limit)].append(_child(kind, proxied, items, limit, counts))
            for kind, limit in runs:
                got = samples[(kind, limit)]
                median = {k: statistics.median(s[k] for s in got)
                          for k in ("wall", "cpu", "requests", "rounds")}  # fmt: skip
                median["right"] = all(s["right"] for s in got)
                rows.append((items, kind if spread else f"{kind} (limit={limit:,})", median))
                print(items, kind, limit, json.dumps(median), flush=True)  # as they come
    what = (f"a cold list_namespaces of {args.namespaces} namespaces" if spread
            else "a cold search(namespace, filter, limit=10)")  # fmt: skip
    print(f"\nlatency {args.latency * 1000:.0f} ms per request, medians of {args.samples} "
          f"new processes each: {what}")  # fmt: skip
    right = "every namespace" if spread else "the 5 matches"
    print(f"| items | store | wall ms | CPU ms | requests | rounds | {right} |")
    print("|---|---|---|---|---|---|---|")
    for items, kind, m in rows:
        print(f"| {items:,} | {kind} | {m['wall'] * 1000:.0f} | {m['cpu'] * 1000:.0f} "
              f"| {m['requests']:.0f} | {m['rounds']:.0f} "
              f"| {'all' if m['right'] else 'not all'} |")  # fmt: skip
    by = {(i, k): m for i, k, m in rows}
    if "aws-dynamodb" in kinds:
        print("\nstashpoint / aws-dynamodb, same run:")
        for items in sorted({i for i, _, _ in rows}):
            ours = by[(items, "stashpoint" if spread else "stashpoint (limit=10)")]
            for limit in (10,) if spread else (10, items):
                theirs = by[
                    (items, "aws-dynamodb" if spread else f"aws-dynamodb (limit={limit:,})")
                ]
                print(f"  {items:,} items, theirs with limit={limit:,}: wall "
                      f"{ours['wall'] / theirs['wall']:.2f}x, "
                      f"CPU {ours['cpu'] / theirs['cpu']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
