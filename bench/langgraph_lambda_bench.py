"""LangGraph on Lambda: a cold turn per process, with every request paying a round trip.

Issue 52. A chat agent (a user message and an AI message of ~2 KB of text per turn,
LangChain messages, `add_messages`) whose thread is already `--turns` long; then, for each
saver, `--samples` more turns, **each in a new process** (as a cold Lambda is), and as many
cold `get_tuple` reads, each in a new process too. Every S3 and DynamoDB request goes
through a latency proxy on 127.0.0.1 (`bench/latency_proxy.py`, `--latency` seconds before
each request is relayed: 15 ms by default) in front of SeaweedFS and DynamoDB Local.

Savers, in the same run, on the same servers:

- `stashpoint`: `StashpointSaver` over `s3://...?index=dynamodb://...` (SeaweedFS + the
  index on DynamoDB Local);
- `aws-dynamodb`: `langgraph_checkpoint_aws.DynamoDBSaver` 1.2.6 (its table on DynamoDB
  Local, `PK`/`SK`; checkpoints past 350 KB offloaded to the same SeaweedFS, as its docs
  advise for long threads), installed by this bench's caller (`pip install
  langgraph-checkpoint-aws==1.2.6`); left out, with a note, when it is not installed;
- `objectstorage`: `langgraph_checkpoint_objectstorage.ObjectStorageSaver` 0.1.15 on s3fs,
  on the same SeaweedFS (`pip install langgraph-checkpoint-objectstorage==0.1.15`); left
  out when it is not installed.

Per saver and length (the savers' samples alternate, one process each): the median over
the samples of a cold turn's wall time and process CPU (from opening the saver to
`invoke` returning; imports excluded, measured apart),
requests and rounds (counted at the proxy: a request that arrives while none is in flight
starts a round), and for stashpoint the requests it sends *after* the turn returned (its
seals and clean-up, `StashpointSaver.flush`); the same for a cold `get_tuple`.

    .venv/bin/python -m bench.langgraph_lambda_bench [--turns 50,200] [--samples 5]
        [--latency 0.015] [--durability sync] [--peers aws-dynamodb,objectstorage]

With `--baseline-src DIR` (the `src` folder of another checkout of stashpoint, e.g. a `git
worktree` of the commit before a change) a fourth saver, `stashpoint-base`, runs that code in
its own processes (its thread written by it too), alternating with the others: an A/B of a
change in one run, which these noisy machines need.

With `BENCH_PREIMPORT=1` every saver's modules (boto3, stashpoint's S3 and DynamoDB
backends, langgraph-checkpoint-aws) are imported before the clock starts, so the times hold
no lazy import of either side. With `BENCH_PROFILE=DIR` in the environment each child writes a cProfile of its call to
`DIR/{saver}-{turn|read}-{n}.prof` (the times it prints are then the profiled ones).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from bench.common import started_servers
from bench.latency_proxy import Counts, LatencyProxy

_CHILD = r"""
import json, sys, time
kind, where, thread, turn, durability, mode = sys.argv[1:7]
where = json.loads(where)
from bench.langgraph_lambda_bench import open_saver, graph_of, user_message
import stashpoint.langgraph  # imports first: a Lambda's init is measured apart
import os
if os.environ.get("BENCH_PREIMPORT"):  # every saver's modules imported before the clock
    import boto3, stashpoint._backends.s3, stashpoint._backends.dynamodb
    try:
        import langgraph_checkpoint_aws, langgraph_checkpoint_objectstorage
    except ImportError:
        pass
config = {"configurable": {"thread_id": thread}}
import os, cProfile
profile = cProfile.Profile() if os.environ.get("BENCH_PROFILE") else None
if profile is not None:
    profile.enable()
wall, cpu = time.perf_counter(), time.process_time()
saver, close = open_saver(kind, where, background=False)
opened = time.process_time() - cpu
if mode == "turn":
    graph_of(saver).invoke({"messages": [user_message(int(turn))]}, config, durability=durability)
else:
    found = saver.get_tuple(config)
    assert found is not None
result = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "open": opened}
if profile is not None:
    profile.disable()
    profile.dump_stats(f"{os.environ['BENCH_PROFILE']}/{kind}-{mode}-{turn}.prof")
print(json.dumps(result), flush=True)
sys.stdin.readline()  # the parent counted the call's requests: now the work after it
if hasattr(saver, "flush"):
    saver.flush()
close()
"""


def _text(seed: int, size: int = 2000) -> str:
    """Deterministic prose-like text of about `size` characters."""
    import random

    rng = random.Random(seed)
    words = ["checkpoint", "agent", "thread", "tool", "result", "the", "of", "and", "a",
             "message", "state", "graph", "node", "value", "bucket", "write", "read", "to"]  # fmt: skip
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)


def user_message(turn: int) -> Any:
    """The user's message of a turn."""
    return HumanMessage(content=f"turn {turn}: " + _text(turn, 300))


class State(TypedDict):
    """The chat's state: its messages."""

    messages: Annotated[list[AnyMessage], add_messages]


def graph_of(saver: Any) -> Any:
    """A chat agent: each turn adds the user's message and a ~2 KB AI answer."""

    def agent(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"answer {n}: " + _text(10_000 + n))]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=saver)


def open_saver(kind: str, where: dict[str, str], *, background: bool = True) -> tuple[Any, Any]:
    """Open a saver of `kind` at `where` (endpoints, names); return it and its closer."""
    if kind in ("stashpoint", "stashpoint-base"):  # the base: PYTHONPATH names its code
        import stashpoint
        from stashpoint.langgraph import StashpointSaver

        stash = stashpoint.open(where["url"], index_endpoint_url=where["dynamodb"])
        return StashpointSaver(stash, background=background), stash.close
    if kind == "objectstorage":
        from langgraph_checkpoint_objectstorage import ObjectStorageSaver

        saver = ObjectStorageSaver.from_conn_string(
            f"s3://{where['bucket']}/{where['prefix']}-os",
            client_kwargs={"endpoint_url": where["s3"], "region_name": "us-east-1"},
        )
        return saver, lambda: None
    if kind == "aws-dynamodb":
        from botocore.config import Config
        from langgraph_checkpoint_aws import DynamoDBSaver

        # Checkpoints past DynamoDB's 400 KB item go to S3 (the saver's own offload, as its
        # docs advise for long threads): the same SeaweedFS, through the same proxy.
        saver = DynamoDBSaver(
            table_name=where["table"], endpoint_url=where["dynamodb"], region_name="us-east-1",
            boto_config=Config(s3={"addressing_style": "path"}),
            s3_offload_config={"bucket_name": where["bucket"], "endpoint_url": where["s3"],
                               "key_prefix": where["prefix"]},
        )  # fmt: skip
        return saver, lambda: None
    raise ValueError(kind)


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


_PEERS = {
    "aws-dynamodb": "langgraph_checkpoint_aws",
    "objectstorage": "langgraph_checkpoint_objectstorage",
}
"""The peer savers and the module each needs."""


@contextmanager
def _servers() -> Iterator[tuple[Any, Any, str, str]]:
    """SeaweedFS and DynamoDB Local on 127.0.0.1, with the stash's index table and the aws
    saver's table; yields the servers and the two table names."""
    from stashpoint._backends.dynamodb import create_table

    with started_servers() as (s3, dynamo):
        index = f"bench-{uuid.uuid4().hex[:8]}"
        create_table(dynamo.client(), index)
        aws = f"aws-{uuid.uuid4().hex[:8]}"
        client: Any = dynamo.client()
        client.create_table(
            TableName=aws,
            KeySchema=[
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": "SK", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "PK", "AttributeType": "S"},
                {"AttributeName": "SK", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield s3, dynamo, index, aws


_BASELINE = "stashpoint-base"
"""The saver kind that runs another checkout's stashpoint (`--baseline-src`)."""


def _env(kind: str, baseline: str | None) -> dict[str, str] | None:
    """The environment of a child of `kind`: the baseline's code first on the path."""
    if kind != _BASELINE or baseline is None:
        return None
    return {**os.environ, "PYTHONPATH": baseline}


def _child(
    kind: str, where: dict[str, str], thread: str, turn: int, durability: str, mode: str,
    counts: Counts, baseline: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run one call in a new process; return its times and the requests and rounds of the
    call and of the work after it."""
    process = subprocess.Popen(
        [sys.executable, "-c", _CHILD, kind, json.dumps(where), thread, str(turn), durability,
         mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent,
        env=_env(kind, baseline),
    )  # fmt: skip
    assert process.stdin is not None
    assert process.stdout is not None
    counts.reset()
    line = process.stdout.readline()
    if not line:
        process.wait(timeout=600)
        raise RuntimeError(f"{kind} {mode} failed")
    result: dict[str, Any] = json.loads(line)
    result["requests"], result["rounds"] = counts.requests, counts.rounds
    counts.reset()
    process.stdin.write("\n")
    process.stdin.flush()
    if process.wait(timeout=600) != 0:
        raise RuntimeError(f"{kind} {mode} failed after the call")
    result["after"] = counts.requests
    return result


def _build(
    kind: str, where: dict[str, str], thread: str, turns: int, baseline: str | None = None
) -> None:
    """Write `turns` turns of the thread, warm, straight to the servers (no proxy).

    The baseline's thread is written by the baseline's code, in a process of its own.
    """
    if kind == _BASELINE and baseline is not None:
        # The child builds as `stashpoint` (no baseline given: it does not spawn again).
        script = "import sys, json; from bench.langgraph_lambda_bench import _build; " + (
            "_build('stashpoint', json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]))"
        )
        subprocess.run(
            [sys.executable, "-c", script, json.dumps(where), thread, str(turns)],
            check=True, cwd=Path(__file__).parent.parent, env=_env(kind, baseline),
        )  # fmt: skip
        return
    saver, close = open_saver(kind, where)
    graph = graph_of(saver)
    config = {"configurable": {"thread_id": thread}}
    for turn in range(turns):
        graph.invoke({"messages": [user_message(turn)]}, config)
    if hasattr(saver, "flush"):
        saver.flush()
    close()


def _imports(kind: str) -> float:
    """Seconds a new process takes to import what the saver needs (a Lambda's init)."""
    module = "stashpoint.langgraph" if kind == "stashpoint" else _PEERS[kind]
    script = (
        "import time; t = time.perf_counter(); import langgraph.graph, " + module
        + "; print(time.perf_counter() - t)"
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return float(done.stdout)


def main() -> None:
    from tests import servers

    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", default="50,200")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.015)
    parser.add_argument("--durability", default="sync")
    parser.add_argument("--peers", help="the peers to run, of those installed (default: all)")
    parser.add_argument("--baseline-src", help="another checkout's src: runs as stashpoint-base")
    args = parser.parse_args()
    baseline = None if args.baseline_src is None else str(Path(args.baseline_src).resolve())
    lengths = [int(n) for n in args.turns.split(",")]
    peers = [kind for kind, module in _PEERS.items() if _installed(module)]
    if args.peers is not None:
        peers = [kind for kind in peers if kind in args.peers.split(",")]
    kinds = ["stashpoint", *([_BASELINE] if baseline else []), *peers]
    if len(kinds) == 1:
        print("neither peer saver is installed: stashpoint alone")
    counts = Counts()
    rows: list[tuple[int, str, str, dict[str, float]]] = []
    with (
        _servers() as (s3, dynamo, index, aws),
        LatencyProxy(s3.endpoint, args.latency, counts) as s3_proxy,
        LatencyProxy(dynamo.endpoint, args.latency, counts) as dynamo_proxy,
    ):
        prefix = f"lambda-{uuid.uuid4().hex[:8]}"
        aws_s3 = {"table": aws, "bucket": servers.VERSIONED_BUCKET, "prefix": f"{prefix}-aws"}
        direct = {"url": s3.url(prefix) + f"&index=dynamodb://{index}",
                  "dynamodb": dynamo.endpoint, "s3": s3.endpoint, **aws_s3}  # fmt: skip
        proxied = {"url": s3.url(prefix, endpoint=s3_proxy.endpoint)
                   + f"&index=dynamodb://{index}",
                   "dynamodb": dynamo_proxy.endpoint, "s3": s3_proxy.endpoint,
                   **aws_s3}  # fmt: skip
        for turns in lengths:
            threads = {kind: f"{kind}-{turns}-{uuid.uuid4().hex[:6]}" for kind in kinds}
            for kind, thread in threads.items():
                _build(kind, direct, thread, turns, baseline)
            for mode in ("turn", "read"):
                # The savers' samples alternate, so a machine whose speed drifts during the
                # run (these are shared) slows both alike and the ratio holds.
                samples: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
                for i in range(args.samples):
                    for kind, thread in threads.items():
                        samples[kind].append(
                            _child(kind, proxied, thread, turns + i, args.durability, mode,
                                   counts, baseline)
                        )  # fmt: skip
                for kind in kinds:
                    median = {
                        key: statistics.median(s[key] for s in samples[kind])
                        for key in ("wall", "cpu", "open", "requests", "rounds", "after")
                    }
                    median["max_requests"] = max(s["requests"] for s in samples[kind])
                    rows.append((turns, kind, mode, median))
    imports = {
        kind: statistics.median(_imports(kind) for _ in range(3))
        for kind in kinds
        if kind != _BASELINE
    }
    print(f"\nlatency {args.latency * 1000:.0f} ms per request, durability={args.durability}, "
          f"medians of {args.samples} new processes each")  # fmt: skip
    print("| turns | saver | call | wall ms | CPU ms | of it opening | requests (max) | rounds "
          "| after |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for turns, kind, mode, m in rows:
        call = "cold turn" if mode == "turn" else "cold get_tuple"
        print(f"| {turns} | {kind} | {call} | {m['wall'] * 1000:.0f} | {m['cpu'] * 1000:.0f} "
              f"| {m['open'] * 1000:.0f} | {m['requests']:.0f} ({m['max_requests']:.0f}) | {m['rounds']:.0f} "
              f"| {m['after']:.0f} |")  # fmt: skip
    by = {(t, k, m): v for t, k, m, v in rows}
    for peer in kinds[1:]:
        print(f"\nstashpoint / {peer}, same run:")
        for turns in lengths:
            for mode in ("turn", "read"):
                ours, theirs = by[(turns, "stashpoint", mode)], by[(turns, peer, mode)]
                print(f"  {turns} turns, {mode}: wall {ours['wall'] / theirs['wall']:.2f}x, "
                      f"CPU {ours['cpu'] / theirs['cpu']:.2f}x")  # fmt: skip
    for kind, seconds in imports.items():
        print(f"imports of a new process ({kind}): {seconds * 1000:.0f} ms")


if __name__ == "__main__":
    main()
