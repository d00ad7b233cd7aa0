"""Where the suite's heaviest tests go in its order, so that xdist starts them first.

`pytest-xdist`'s work stealing (`make test`: `--dist worksteal`) hands each worker one
contiguous slice of the collected tests and lets an idle worker take the back half of the
longest queue. The heaviest tests (the frameworks' own suites, the contention and crash
tests on real servers: 30-140 s each under load) sat in the last slice, one after another,
and the last of them could start near the end of the run and hold it up alone. A test
marked `heavy(seconds)` is moved to the front of a slice, the slices balanced by those
seconds (longest first), so every worker starts with its share of them and the run ends
on light tests, which are stolen freely.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def slice_sizes(total: int, workers: int) -> list[int]:
    """The sizes of the slices work stealing cuts `total` tests into (xdist's own rule)."""
    sizes, remaining = [], total
    for taken in range(workers):
        size = remaining // (workers - taken)
        sizes.append(size)
        remaining -= size
    return sizes


def heavy_first(items: Sequence[T], weights: Sequence[float | None], workers: int) -> list[T]:
    """Return `items` with the weighted ones at the fronts of the `workers` slices.

    `weights`: each item's expected seconds, None for an ordinary test (kept in order).
    """
    if workers <= 1:
        return list(items)
    heavy = sorted(
        (i for i, weight in enumerate(weights) if weight is not None),
        key=lambda i: -(weights[i] or 0.0),
    )
    if not heavy:
        return list(items)
    sizes = slice_sizes(len(items), workers)
    load = [0.0] * workers
    fronts: list[list[int]] = [[] for _ in range(workers)]
    for i in heavy:  # longest first, each to the least loaded slice with room
        open_slices = [k for k in range(workers) if len(fronts[k]) < sizes[k]]
        chosen = min(open_slices, key=lambda k: load[k])
        fronts[chosen].append(i)
        load[chosen] += weights[i] or 0.0
    ordinary = iter(i for i, weight in enumerate(weights) if weight is None)
    order: list[int] = []
    for k in range(workers):
        order += fronts[k]
        order += [next(ordinary) for _ in range(sizes[k] - len(fronts[k]))]
    return [items[i] for i in order]
