"""How long the event loop stalls while the async API saves and loads large envelopes.

A ticker task wakes every millisecond and records how late each wake-up is, while another
task saves and loads a large transcript in a loop (memory backend: no I/O noise, only the
codec work whose placement is measured; the worker yields to the loop after every call, as
network waits would). The longest lateness is the longest the loop was unavailable to every
other task; the worker's own time shows what the thread hop costs. Measured twice in the same run, alternating: with large
compression and decompression handed to a worker thread (the default, `OFFLOAD_BYTES`),
and with all of it on the loop (the baseline, as before `Compute` existed).

Run: .venv/bin/python -m bench.async_bench
"""

from __future__ import annotations

import asyncio
import statistics
import time

import stashpoint.steps as sansio
from bench.common import transcript
from stashpoint import Envelope, open_async

TICK = 0.001


async def _stalls(payload: dict[str, object], rounds: int) -> tuple[list[float], float]:
    """Return the ticker's lateness samples and the worker's time for `rounds` save+loads."""
    late: list[float] = []
    took = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await asyncio.sleep(TICK)
            late.append(time.perf_counter() - start - TICK)

    async def worker() -> None:
        nonlocal took
        async with open_async("memory://") as stash:
            env = Envelope.initial("big", None, "bench", 1, payload)
            await stash.checkpoints.compare_and_swap(env, None)
            start = time.perf_counter()
            for _ in range(rounds):
                nxt = env.next(payload)
                await stash.checkpoints.compare_and_swap(nxt, env.revision)
                await asyncio.sleep(0)
                env = nxt
                await stash.checkpoints.load("big")
                await asyncio.sleep(0)
            took = time.perf_counter() - start
        done.set()

    await asyncio.gather(ticker(), worker())
    return late, took


def _measure(
    offload_bytes: int, payload: dict[str, object], rounds: int
) -> tuple[list[float], float]:
    saved = sansio.OFFLOAD_BYTES
    sansio.OFFLOAD_BYTES = offload_bytes
    try:
        return asyncio.run(_stalls(payload, rounds))
    finally:
        sansio.OFFLOAD_BYTES = saved


def main() -> None:
    print("event-loop stall while saving+loading large envelopes (memory backend, same run)")
    print(f"{'payload':>8} {'placement':>10} {'ticks':>6} {'max stall ms':>13} "
          f"{'median stall ms':>16} {'worker ms/op':>13}")  # fmt: skip
    rounds = 10
    for size in (1 << 20, 8 << 20):
        payload = transcript(size)
        late: dict[str, list[float]] = {"on loop": [], "off loop": []}
        took: dict[str, list[float]] = {"on loop": [], "off loop": []}
        for _ in range(3):  # alternate, so drift hits both alike
            for name, threshold in (("on loop", 1 << 62), ("off loop", sansio.OFFLOAD_BYTES)):
                samples, seconds = _measure(threshold, payload, rounds)
                late[name] += samples
                took[name].append(seconds / (2 * rounds))
        for name in late:
            print(f"{size >> 20:>6}MB {name:>10} {len(late[name]):>6} "
                  f"{max(late[name]) * 1e3:13.1f} {statistics.median(late[name]) * 1e3:16.2f} "
                  f"{statistics.median(took[name]) * 1e3:13.1f}")  # fmt: skip
        stall = max(late["off loop"]) / max(late["on loop"])
        cost = statistics.median(took["off loop"]) / statistics.median(took["on loop"])
        print(f"{'':>8} {'off/on':>10} {'':>6} {stall:13.2f} {'':>16} {cost:13.2f}")


if __name__ == "__main__":
    main()
