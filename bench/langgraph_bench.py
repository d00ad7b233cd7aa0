"""LangGraph savers side by side on one SeaweedFS and one DynamoDB Local, in one run.

Savers: `StashpointSaver` (S3), `StashpointSaver` (S3 + DynamoDB index), and, when
installed (`pip install langgraph-checkpoint-aws==1.2.6 langgraph-checkpoint-objectstorage
==0.1.15 s3fs`), langgraph-checkpoint-aws's `DynamoDBSaver` with S3 offload and
langgraph-checkpoint-objectstorage's `ObjectStorageSaver` on s3fs.

Each runs the same messages agent for `--steps` steps (a coding agent: each step a user
message and a tool result of 1-3 KB of real source text, as LangChain messages), then:
- requests per step over the last 20 steps and GETs over the run;
- a new saver's `get_tuple` of the latest checkpoint, as a new process does it (a new
  stash, or a new peer saver, each time): its requests, and its ms with the saver's
  construction (its clients) included, median of 5;
- requests per operation, counted at botocore's HTTP send (every client, sync and async):
  get latest (`get_tuple` without id), list 20, `put_writes` of 3 writes, `put` of a step;
- step latency, p50 of steps 10-30 and of the last 20 (late / early);
- bytes stored at the end (S3 objects under the saver's prefix + DynamoDB item bytes)
  / zstd size of the final state's serialized messages; for stashpoint also at rest,
  after `gc --pack`.

    .venv/bin/python -m bench.langgraph_bench [--steps 200]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import zstandard
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import stashpoint
from bench.log_bench import _sources
from stashpoint.langgraph import StashpointSaver
from tests import servers

_counts: Counter[str] = Counter()
_counting = threading.local()
_lock = threading.Lock()


def _count(method: str, host: str) -> None:
    service = "dynamodb" if "dynamodb" in host or ":8000" in host else "s3"
    with _lock:
        _counts[f"{service} {method}"] += 1


def _install_counters(dynamodb_endpoint: str) -> None:
    """Count every HTTP request botocore and aiobotocore send (all savers, one place)."""
    import aiobotocore.endpoint
    import botocore.endpoint

    port = dynamodb_endpoint.rsplit(":", 1)[1]

    def service(host: str) -> str:
        return "dynamodb" if host.endswith(f":{port}") else "s3"

    sync_send = botocore.endpoint.Endpoint._send

    def counted_send(self: Any, request: Any) -> Any:
        with _lock:
            _counts[f"{service(self.host)} {request.method}"] += 1
        return sync_send(self, request)

    botocore.endpoint.Endpoint._send = counted_send  # type: ignore[method-assign]
    async_send = aiobotocore.endpoint.AioEndpoint._send

    async def counted_async_send(self: Any, request: Any) -> Any:
        with _lock:
            _counts[f"{service(self.host)} {request.method}"] += 1
        return await async_send(self, request)

    aiobotocore.endpoint.AioEndpoint._send = counted_async_send  # type: ignore[method-assign]


@contextlib.contextmanager
def _requests() -> Iterator[Counter[str]]:
    with _lock:
        _counts.clear()
    seen: Counter[str] = Counter()
    yield seen
    with _lock:
        seen.update(_counts)
        _counts.clear()


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(saver: Any, source: Callable[[], str]) -> Any:
    def agent(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"Read it. Next, module {n}.\n{source()}")]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def _s3_bytes(client: Any, bucket: str, prefix: str) -> tuple[int, int]:
    total = objects = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            total += item["Size"]
            objects += 1
    return total, objects


def _dynamodb_bytes(client: Any, table: str) -> int:
    total = 0
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            for name, value in item.items():
                total += len(name)
                for v in value.values():
                    total += len(v) if isinstance(v, (str, bytes)) else len(str(v))
    return total


def _run(
    name: str, new_saver: Callable[[], Any], steps: int, source: Callable[[], str]
) -> dict[str, Any]:
    """Run the agent for `steps` steps on a saver from `new_saver`, then measure it.

    `new_saver` makes a saver as a new process would (no cache, nothing remembered): the
    cold reads of the latest checkpoint use one each.
    """
    saver = new_saver()
    graph = _graph(saver, source)
    config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:6]}"}}
    times: list[float] = []
    run_requests: Counter[str] = Counter()
    late_requests: Counter[str] = Counter()
    for step in range(steps):
        started = time.perf_counter()
        with _requests() as seen:
            graph.invoke(
                {"messages": [HumanMessage(content=f"step {step}: {source()[:300]}")]}, config
            )
        times.append(time.perf_counter() - started)
        run_requests.update(seen)
        if step >= steps - 20:
            late_requests.update(seen)
    cold_ms: list[float] = []
    cold_get: Counter[str] = Counter()
    for _ in range(5):  # a new process's get_state: a new saver (and its clients) each time
        with _requests() as seen:
            started = time.perf_counter()
            new_saver().get_tuple(config)
            cold_ms.append((time.perf_counter() - started) * 1000)
        cold_get = seen
    latest = saver.get_tuple(config)
    with _requests() as get_latest:
        saver.get_tuple({"configurable": {**config["configurable"], "checkpoint_ns": ""}})
    with _requests() as list_20:
        found = list(saver.list(config, limit=20))
    assert len(found) == 20
    with _requests() as writes:
        saver.put_writes(latest.config, [("a", 1), ("b", "two"), ("c", [3])], "bench-task")
    checkpoint = dict(latest.checkpoint)
    checkpoint["id"] = str(uuid.uuid4())
    next_version = saver.get_next_version(checkpoint["channel_versions"].get("messages"), None)
    checkpoint["channel_versions"] = {**checkpoint["channel_versions"], "messages": next_version}
    with _requests() as put:
        saver.put(latest.config, checkpoint, {"source": "loop", "step": steps * 2},
                  {"messages": next_version})  # fmt: skip
    final = zstandard.ZstdCompressor(level=3).compress(
        saver.serde.dumps_typed(latest.checkpoint["channel_values"]["messages"])[1]
    )
    early = statistics.median(times[10:30]) if steps >= 30 else statistics.median(times)
    late = statistics.median(times[-20:])
    return {
        "name": name,
        "requests_per_step_late": _total(dict(late_requests)) / min(20, steps),
        "gets_over_run": sum(n for k, n in run_requests.items() if k.endswith(" GET")),
        "cold_get": dict(cold_get),
        "cold_get_ms": statistics.median(cold_ms),
        "get_latest": dict(get_latest),
        "list_20": dict(list_20),
        "put_writes_3": dict(writes),
        "put": dict(put),
        "step_ms_early": early * 1000,
        "step_ms_late": late * 1000,
        "final_zstd": len(final),
    }


def _total(requests: dict[str, int]) -> int:
    return sum(requests.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    import os

    # The servers' test credentials, as `bench.common.real_servers` sets them.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    source = _sources()
    work = Path(tempfile.mkdtemp())
    (work / "s3").mkdir()
    (work / "ddb").mkdir()
    s3_server = servers.start_seaweedfs(work / "s3")
    dynamo = servers.start_dynamodb_local(work / "ddb")
    _install_counters(dynamo.endpoint)
    results: list[dict[str, Any]] = []
    s3 = s3_server.client()
    try:
        bucket = servers.VERSIONED_BUCKET
        from stashpoint._backends.dynamodb import create_table

        create_table(dynamo.client(), "stash-index")
        for name, with_index in (("stashpoint (S3)", False), ("stashpoint (S3 + index)", True)):
            prefix = f"sp-{uuid.uuid4().hex[:6]}"
            url = s3_server.url(prefix)
            options: dict[str, Any] = {}
            if with_index:
                url += "&index=dynamodb://stash-index"
                options["index_endpoint_url"] = dynamo.endpoint
            opened: list[Any] = []

            def new_saver(url: str = url, options: dict[str, Any] = options) -> Any:
                opened.append(stashpoint.open(url, **options))
                return StashpointSaver(opened[-1])

            result = _run(name, new_saver, args.steps, source)
            for stash in opened:
                stash.close()
            result["bytes"], result["objects"] = _s3_bytes(s3, bucket, prefix)
            results.append(result)
            # At rest: sealed entries are deleted after `log_delete_after` (1 h) by `gc`.
            with stashpoint.open(url, log_delete_after=timedelta(0), **options) as stash:
                stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0), pack=True)
            at_rest = dict(result, name=f"{name}, at rest (after gc --pack)")
            at_rest["bytes"], at_rest["objects"] = _s3_bytes(s3, bucket, prefix)
            results.append(at_rest)
        try:
            from langgraph_checkpoint_aws import DynamoDBSaver

            table = f"lg-{uuid.uuid4().hex[:6]}"
            dynamo.client().create_table(
                TableName=table,
                KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"},
                           {"AttributeName": "SK", "KeyType": "RANGE"}],
                AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                      {"AttributeName": "SK", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )  # fmt: skip
            prefix = f"aws-{uuid.uuid4().hex[:6]}"

            def aws_saver(table: str = table, prefix: str = prefix) -> Any:
                return DynamoDBSaver(
                    table_name=table, region_name="us-east-1", endpoint_url=dynamo.endpoint,
                    s3_offload_config={"bucket_name": bucket, "endpoint_url": s3_server.endpoint,
                                       "key_prefix": prefix},
                )  # fmt: skip

            result = _run("langgraph-checkpoint-aws 1.2.6", aws_saver, args.steps, source)
            s3_bytes, objects = _s3_bytes(s3, bucket, prefix)
            result["bytes"] = s3_bytes + _dynamodb_bytes(dynamo.client(), table)
            result["objects"] = objects
            results.append(result)
        except ImportError:
            print("langgraph-checkpoint-aws not installed: skipped")
        try:
            from langgraph_checkpoint_objectstorage import ObjectStorageSaver

            prefix = f"os-{uuid.uuid4().hex[:6]}"

            def os_saver(prefix: str = prefix) -> Any:
                return ObjectStorageSaver.from_conn_string(
                    f"s3://{bucket}/{prefix}",
                    client_kwargs={"endpoint_url": s3_server.endpoint, "region_name": "us-east-1"},
                )

            result = _run("langgraph-checkpoint-objectstorage 0.1.15", os_saver, args.steps, source)
            result["bytes"], result["objects"] = _s3_bytes(s3, bucket, prefix)
            results.append(result)
        except ImportError:
            print("langgraph-checkpoint-objectstorage not installed: skipped")
    finally:
        servers.stop(s3_server)
        servers.stop(dynamo)
    print(f"\n{args.steps} steps of a messages agent (1-3 KB tool text per step)\n")
    header = ("saver", "requests per step (last 20)", "GETs over the run",
              "cold get_tuple: requests", "new saver + get_tuple ms (median of 5)",
              "get latest (warm)", "list 20", "put_writes(3)", "put", "step late/early",
              "bytes stored / final zstd", "objects")  # fmt: skip
    print(" | ".join(header))
    for r in results:
        print(" | ".join([
            r["name"],
            f"{r['requests_per_step_late']:.1f}",
            str(r["gets_over_run"]),
            f"{_total(r['cold_get'])} {r['cold_get']}",
            f"{r['cold_get_ms']:.0f}",
            f"{_total(r['get_latest'])} {r['get_latest']}",
            f"{_total(r['list_20'])}",
            f"{_total(r['put_writes_3'])} {r['put_writes_3']}",
            f"{_total(r['put'])} {r['put']}",
            f"{r['step_ms_late'] / r['step_ms_early']:.2f} ({r['step_ms_early']:.0f} -> "
            f"{r['step_ms_late']:.0f} ms)",
            f"{r['bytes'] / r['final_zstd']:.2f}x ({r['bytes']} / {r['final_zstd']})",
            str(r["objects"]),
        ]))  # fmt: skip


if __name__ == "__main__":
    main()
