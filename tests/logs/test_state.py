"""The one update loop of log-backed state (`logs.state`): what a lost race costs.

A writer whose known head is not the latest appends after it, loses, reads the head again
and appends after that: the refused append is not read to name the winner, since the read
that follows names it (and finds a purge). Counted on the memory backend with a run's
transitions (agent conversations and LangGraph threads go through the same loop).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import stashpoint
from stashpoint import CheckpointConflict
from tests.meter import Meter


def _one_lost_race(url: str, stale: Any, fresh: Any) -> list[str]:
    """Open two stashes; `stale(stash)` is done by the first (it learns the head), then
    `fresh` moves the head by the second, then `stale` again by the first: its requests."""
    with stashpoint.open(url) as first, stashpoint.open(url) as second:
        stale(first)
        fresh(second)
        meter = Meter(first)
        stale(first)
        return meter.sent


def test_a_run_transition_that_loses_a_race_lists_once() -> None:
    url = f"memory://state-{uuid.uuid4().hex}"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("race")
    labels = iter(range(100))

    def record(stash: Any) -> None:
        stash.runs.record_attempt(run_id, f"n{next(labels)}", 1)

    sent = _one_lost_race(url, record, record)
    # The refused PUT, one listing (entries and segments at once), the newest entries,
    # the PUT that lands, and the index.
    assert sent.count("PutObject") == 2, sent
    assert sent.count("ListKeys") == 2, sent
    assert sent.index("ListKeys") > sent.index("PutObject")


def test_a_lost_race_still_ends_in_purged_for_a_purged_log() -> None:
    url = f"memory://state-{uuid.uuid4().hex}"
    with stashpoint.open(url) as first, stashpoint.open(url) as second:
        run_id = first.runs.create_run("race")
        first.runs.record_attempt(run_id, "a", 1)
        second.purge(run=run_id)
        with pytest.raises(stashpoint.Purged):
            first.runs.record_attempt(run_id, "b", 1)


def test_a_direct_append_that_loses_names_the_winner() -> None:
    """`stash.logs.append` (no loop) reads the listing to say which version won."""
    with stashpoint.open(f"memory://state-{uuid.uuid4().hex}") as stash:
        head = stash.logs.append("l", ["a"], after=None)
        for n in range(3):
            stash.logs.append("l", [n], after=stash.logs.head("l"))
        with pytest.raises(CheckpointConflict, match="latest is 3") as lost:
            stash.logs.append("l", ["late"], after=head)
        assert lost.value.actual_revision == 3
