"""The suite's own order: each xdist worker's slice starts with its share of the heavy tests."""

from __future__ import annotations

from tests.scheduling import heavy_first, slice_sizes


def test_slices_are_cut_as_work_stealing_cuts_them() -> None:
    assert slice_sizes(3570, 5) == [714, 714, 714, 714, 714]
    assert slice_sizes(11, 3) == [3, 4, 4]
    assert sum(slice_sizes(3571, 5)) == 3571


def test_heavy_tests_lead_the_slices_longest_first_and_the_rest_keep_their_order() -> None:
    items = [f"t{i}" for i in range(20)]
    weights: list[float | None] = [None] * 20
    for index, seconds in {17: 130.0, 18: 110.0, 19: 60.0, 3: 45.0, 4: 45.0}.items():
        weights[index] = seconds
    ordered = heavy_first(items, weights, 4)
    assert sorted(ordered) == sorted(items)
    slices = [ordered[k * 5 : (k + 1) * 5] for k in range(4)]
    # Longest first, each to the least loaded slice: 130 | 110 | 60 | 45, then 45 + 45.
    assert [s[0] for s in slices] == ["t17", "t18", "t19", "t3"]
    assert slices[3][:2] == ["t3", "t4"] and slices[2][1] != "t4"
    ordinary = [t for t in ordered if weights[items.index(t)] is None]
    assert ordinary == [t for t, w in zip(items, weights, strict=True) if w is None]


def test_one_worker_or_no_heavy_test_keeps_the_order() -> None:
    items = ["a", "b", "c"]
    assert heavy_first(items, [None, 5.0, None], 1) == items
    assert heavy_first(items, [None, None, None], 3) == items
