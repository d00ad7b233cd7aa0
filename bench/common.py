"""Shared helpers for the benchmarks: transcript-like payloads and robust timing."""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def transcript(target_bytes: int, seed: int = 7) -> dict[str, object]:
    """An agent transcript of roughly `target_bytes` of JSON: messages, tool calls, usage."""
    rng = random.Random(seed)
    words = ["the", "agent", "called", "search", "with", "query", "result", "token", "plan",
             "résumé", "日本語", "step", "observation", "tool", "because", "value", "none"]  # fmt: skip
    messages: list[dict[str, object]] = []
    size = 0
    turn = 0
    while size < target_bytes:
        turn += 1
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 200)))
        message: dict[str, object] = {"role": rng.choice(["user", "assistant", "tool"]),
                                      "content": text, "turn": turn}  # fmt: skip
        if rng.random() < 0.3:
            message["tool_calls"] = [{"id": f"call_{turn}", "name": "search",
                                      "arguments": {"q": text[:40], "k": rng.randint(1, 9)}}]  # fmt: skip
        messages.append(message)
        size += len(text) + 60
    return {"transcript": messages, "usage": {"input_tokens": size // 4, "output_tokens": turn}}


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `fn` over `repeat` runs, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median times of several functions measured in alternation (fair under drift)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


@contextmanager
def started_servers() -> Iterator[tuple[Any, Any]]:
    """Start SeaweedFS and DynamoDB Local on 127.0.0.1 (the tests' servers, their
    credentials in the environment); yield both; stop both after."""
    from tests import servers

    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory() as data:
        for sub in ("s3", "dynamo"):
            (Path(data) / sub).mkdir()
        s3 = servers.start_seaweedfs(Path(data) / "s3")
        dynamo = servers.start_dynamodb_local(Path(data) / "dynamo")
        try:
            yield s3, dynamo
        finally:
            servers.stop(dynamo)
            servers.stop(s3)


@contextmanager
def real_servers(prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Start SeaweedFS and DynamoDB Local on 127.0.0.1 with a fresh bucket prefix and index
    table; yield the stash URL and its options; stop both after."""
    from stashpoint._backends.dynamodb import create_table

    with started_servers() as (s3, dynamo):
        table = f"bench-{uuid.uuid4().hex[:8]}"
        create_table(dynamo.client(), table)
        url = s3.url(f"{prefix}-{uuid.uuid4().hex}") + f"&index=dynamodb://{table}"
        yield url, {"index_endpoint_url": dynamo.endpoint}


def measure_in_fresh_process(script: str, *args: str, source: str | None = None) -> Any:
    """Run `script` (which prints one JSON object) in a fresh interpreter; return the JSON.

    `source`: a source tree to import stashpoint from instead (a worktree of the code
    before), so both trees are measured in the same run, each in a process of its own.
    """
    import json
    import subprocess
    import sys

    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = source
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True, text=True, check=True, env=env, timeout=1800,
    )  # fmt: skip
    return json.loads(done.stdout)
