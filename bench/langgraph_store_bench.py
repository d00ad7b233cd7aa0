"""The LangGraph store: requests and time per operation, and semantic search at scale.

Issue 27 #4. Two parts, each with LangGraph's `InMemoryStore` measured in the same run as
the baseline (the only peer store installed here; it holds everything in RAM and sends no
request, so its times are a floor, not a competitor's):

1. On SeaweedFS: `--items` items under one namespace; requests (counted with
   `tests.meter.Meter` over `Stash.intercept`) and median milliseconds of a put of a new
   key, a put of a known key, a cold get, and `search(filter, limit=10)` cold (a new
   store) and warm (the same store again).
2. On the embedded default (memory): `--vector-items` items with 64-dimension vectors
   (seeded random unit vectors: what is measured is the store, not an embedding model);
   `search(query, limit=10)` latency, warm, and recall@10 against an exact numpy top 10.

    .venv/bin/python -m bench.langgraph_store_bench [--items 2000] [--vector-items 100000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

import stashpoint
from stashpoint.langgraph import StashpointStore
from tests import servers
from tests.meter import Meter

NS = ("docs", "team-1")


def _ms(work: Callable[[], Any], times: int) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        work()
        spent.append((time.perf_counter() - started) * 1000)
    return statistics.median(spent)


def _requests(stash: Any, work: Callable[[], Any]) -> int:
    meter = Meter(stash)
    work()
    meter.interception.remove()
    return sum(meter.requests.values())


def _operations(url: str, items: int) -> dict[str, float]:
    found: dict[str, float] = {}
    with stashpoint.open(url) as stash:
        store = StashpointStore(stash)
        meter = Meter(stash)
        started = time.perf_counter()
        for n in range(items):
            store.put(NS, f"doc-{n}", {"n": n, "kind": "even" if n % 2 == 0 else "odd"})
        found["put new, ms"] = (time.perf_counter() - started) * 1000 / items
        meter.interception.remove()
        found["put new, requests"] = sum(meter.requests.values()) / items
        found["put known, requests"] = _requests(stash, lambda: store.put(NS, "doc-0", {"n": 0}))
        found["put known, ms"] = _ms(lambda: store.put(NS, "doc-1", {"n": 1}), 20)
    with stashpoint.open(url) as stash:
        cold = StashpointStore(stash)
        found["get cold, requests"] = _requests(stash, lambda: cold.get(NS, "doc-2"))
        found["get, ms"] = _ms(lambda: cold.get(NS, "doc-3"), 20)
        wanted: dict[str, Any] = {"kind": "odd", "n": {"$gte": items - 40}}
        found["search(filter, limit=10) cold, requests"] = _requests(
            stash, lambda: cold.search(NS, filter=wanted, limit=10)
        )
    with stashpoint.open(url) as stash:
        fresh = StashpointStore(stash)
        started = time.perf_counter()
        assert len(fresh.search(NS, filter=wanted, limit=10)) == 10
        found["search(filter, limit=10) cold, ms"] = (time.perf_counter() - started) * 1000
        found["search(filter, limit=10) warm, requests"] = _requests(
            stash, lambda: fresh.search(NS, filter=wanted, limit=10)
        )
        found["search(filter, limit=10) warm, ms"] = _ms(
            lambda: fresh.search(NS, filter=wanted, limit=10), 5
        )
    memory = InMemoryStore()
    for n in range(items):
        memory.put(NS, f"doc-{n}", {"n": n, "kind": "even" if n % 2 == 0 else "odd"})
    found["InMemoryStore search(filter, limit=10), ms"] = _ms(
        lambda: memory.search(NS, filter=wanted, limit=10), 5
    )
    found["InMemoryStore get, ms"] = _ms(lambda: memory.get(NS, "doc-3"), 20)
    return found


def _vectors(items: int, dims: int = 64) -> dict[str, float]:
    rng = np.random.default_rng(27)
    matrix = rng.normal(size=(items, dims)).astype(np.float64)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    texts = [f"memory {n}" for n in range(items)]
    by_text = {text: matrix[n].tolist() for n, text in enumerate(texts)}
    queries = [f"query {q}" for q in range(20)]
    query_vectors = rng.normal(size=(len(queries), dims))
    by_text.update({q: query_vectors[i].tolist() for i, q in enumerate(queries)})

    def embed(batch: list[str]) -> list[list[float]]:
        return [by_text[text] for text in batch]

    index = {"dims": dims, "embed": embed, "fields": ["text"]}
    found: dict[str, float] = {"items": items, "dims": dims}
    url = f"memory://vectors-{uuid.uuid4().hex}"
    # Room for every item (about 1.3 KB each here): a warm search then reads none again.
    with StashpointStore.from_url(url, index=index, cache_bytes=1 << 30) as store:  # type: ignore[arg-type]
        started = time.perf_counter()
        for start in range(0, items, 500):
            store.batch(
                [
                    PutOp(NS, f"m{n}", {"text": texts[n]})
                    for n in range(start, min(items, start + 500))
                ]
            )
        found["put, ms per item"] = (time.perf_counter() - started) * 1000 / items
        started = time.perf_counter()
        store.search(NS, query=queries[0], limit=10)
        found["first search(query, limit=10), ms"] = (time.perf_counter() - started) * 1000
    with StashpointStore.from_url(url, index=index, cache_bytes=1 << 30) as store:  # type: ignore[arg-type]
        started = time.perf_counter()
        store.search(NS, query=queries[0], limit=10)  # a new store reads every item once
        found["cold search(query, limit=10), ms"] = (time.perf_counter() - started) * 1000
        hits = 0
        spent = []
        for q, query in enumerate(queries):
            started = time.perf_counter()
            result = store.search(NS, query=query, limit=10)
            spent.append((time.perf_counter() - started) * 1000)
            scores = matrix @ (query_vectors[q] / np.linalg.norm(query_vectors[q]))
            exact = {f"m{n}" for n in np.argsort(-scores)[:10]}
            hits += len(exact & {item.key for item in result})
        found["search(query, limit=10) warm, ms"] = statistics.median(spent)
        found["recall@10"] = hits / (10 * len(queries))
    memory = InMemoryStore(index=index)  # type: ignore[arg-type]
    for start in range(0, items, 500):
        memory.batch(
            [PutOp(NS, f"m{n}", {"text": texts[n]}) for n in range(start, min(items, start + 500))]
        )
    found["InMemoryStore search(query, limit=10), ms"] = _ms(
        lambda: memory.search(NS, query=queries[1], limit=10), 5
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--vector-items", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    s3_server = servers.start_seaweedfs(work)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    try:
        operations = _operations(s3_server.url(f"store-{uuid.uuid4().hex[:8]}"), args.items)
    finally:
        servers.stop(s3_server)
    print(f"## SeaweedFS, {args.items} items under one namespace")
    for name, value in operations.items():
        print(f"| {name} | {value:.2f} |")
    print(f"## memory, {args.vector_items} items with vectors")
    for name, value in _vectors(args.vector_items).items():
        print(f"| {name} | {value:.3f} |")


if __name__ == "__main__":
    main()
