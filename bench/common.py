"""Shared helpers for the benchmarks: transcript-like payloads and robust timing."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable


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
