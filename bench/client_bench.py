"""Making AWS clients: a new botocore session per client against the process's shared models.

Part 1 (no server): the median time to make an S3 and a DynamoDB client, each way, in
alternation. "each session parses" is how stashpoint made them before `with_shared_models`
(a new session per client, which parses the service's model again); "shared models" is
`LazyClient` now.

Part 2 (SeaweedFS + DynamoDB Local on 127.0.0.1): sixteen threads, each with its own stash
(a client each, as sixteen workers have), complete one attempt each of one run at once;
the slowest completion and the whole, each way, alternating rounds.

Run: .venv/bin/python -m bench.client_bench [--rounds 20] [--fanout-rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import botocore.session

import stashpoint
from bench.common import interleaved, real_servers
from stashpoint._backends import aws
from stashpoint._backends.aws import AwsClientSettings, LazyClient

SETTINGS = AwsClientSettings(endpoint_url="http://127.0.0.1:9", region_name="us-east-1")


def _each_session_parses(service: str) -> Any:
    return botocore.session.Session().create_client(service, **SETTINGS.client_kwargs())


def _shared_models(service: str) -> Any:
    return LazyClient(service, SETTINGS).get()


def _fanout(url: str, options: dict[str, Any]) -> tuple[float, float]:
    """Sixteen stashes complete an attempt each of one run; (slowest, whole) in seconds."""
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("fanout")
        attempts = [stash.runs.record_attempt(run_id, f"n{i}", 1, None) for i in range(16)]
    barrier = threading.Barrier(16)
    took: list[float] = []

    def complete(i: int) -> None:
        with stashpoint.open(url, **options) as worker:
            barrier.wait()
            start = time.perf_counter()
            worker.runs.complete_attempt(attempts[i], {"i": i})
            took.append(time.perf_counter() - start)

    start = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(complete, range(16)))
    return max(took), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fanout-rounds", type=int, default=3)
    args = parser.parse_args()
    _shared_models("s3")  # the first client of the process parses, either way
    _shared_models("dynamodb")
    print("| client | each session parses, ms | shared models, ms | ratio |")
    print("|---|---|---|---|")
    for service in ("s3", "dynamodb"):
        times = interleaved(
            {
                "parses": lambda s=service: _each_session_parses(s),
                "shared": lambda s=service: _shared_models(s),
            },
            args.rounds,
        )
        print(
            f"| {service} | {times['parses'] * 1000:.1f} | {times['shared'] * 1000:.1f} "
            f"| {times['shared'] / times['parses']:.2f}x |"
        )
    sharing = aws.with_shared_models
    results: dict[str, list[tuple[float, float]]] = {"parses": [], "shared": []}
    with real_servers("client-bench") as (url, options):
        for _ in range(args.fanout_rounds):
            for way in ("parses", "shared"):
                aws.with_shared_models = sharing if way == "shared" else (lambda s: s)  # type: ignore[assignment]
                try:
                    results[way].append(_fanout(url, options))
                finally:
                    aws.with_shared_models = sharing  # type: ignore[assignment]
    print()
    print("| 16 stashes complete an attempt of one run | slowest, s (median) | whole, s (median) |")
    print("|---|---|---|")
    for way, label in (("parses", "each session parses"), ("shared", "shared models")):
        slowest = statistics.median(r[0] for r in results[way])
        whole = statistics.median(r[1] for r in results[way])
        print(f"| {label} | {slowest:.2f} | {whole:.2f} |")


if __name__ == "__main__":
    main()
