"""The one update loop of log-backed state (`logs.state`): what a lost race costs.

A writer whose known head is not the latest appends after it, loses, reads the head again
and appends after that: the refused append is not read to name the winner, since the read
that follows names it (and finds a purge). Counted on the memory backend with a run's
transitions (agent conversations and LangGraph threads go through the same loop).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
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


def _run_recorder() -> tuple[str, str, Callable[[Any], None]]:
    """A new stash's URL, a run in it, and a transition of that run for any stash."""
    url = f"memory://state-{uuid.uuid4().hex}"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("race")
    labels = iter(range(100))

    def record(stash: Any) -> None:
        stash.runs.record_attempt(run_id, f"n{next(labels)}", 1)

    return url, run_id, record


def test_a_run_transition_that_loses_a_race_reads_on_in_one_round_without_listing() -> None:
    """The winner is one version ahead: the loser GETs that version and the one after it
    (absent) at once, applies the winner's patch to the state it had, and appends."""
    url, run_id, record = _run_recorder()

    sent = _one_lost_race(url, record, record)
    # The refused PUT, the two GETs, the PUT that lands, and the index.
    assert sent.count("PutObject") == 2, sent
    assert "ListKeys" not in sent, sent
    assert sent[1:3] == ["GetObject", "GetObject"], sent
    with stashpoint.open(url) as stash:  # what a listing's read says: all three
        state = stash.runs.load_run(run_id)
        assert sorted(a.node_id for a in state.attempts) == ["n0", "n1", "n2"]


def test_a_writer_more_than_one_version_behind_lists() -> None:
    """When the log went further than the version after the lost head, the loser reads
    with a listing, as before; nothing of either writer is lost."""
    url, run_id, record = _run_recorder()

    def twice(stash: Any) -> None:
        record(stash)
        record(stash)

    sent = _one_lost_race(url, record, twice)
    assert sent.count("ListKeys") == 2 and sent.count("PutObject") == 2, sent
    with stashpoint.open(url) as stash:
        assert len(stash.runs.load_run(run_id).attempts) == 4


def test_a_loser_meeting_a_planted_version_reads_with_a_listing() -> None:
    """An object at the version after the lost head that does not follow it (another log's
    entry, planted) is not taken as the head: the listing's read judges it (a typed
    error naming the log), and nothing is written after it."""
    url = f"memory://state-{uuid.uuid4().hex}"
    with stashpoint.open(url) as first, stashpoint.open(url) as second:
        run_id = first.runs.create_run("race")
        first.runs.record_attempt(run_id, "a", 1)
        other = second.runs.create_run("other")
        second.runs.record_attempt(other, "x", 1)
        second.runs.record_attempt(other, "y", 1)
        # Version 2 of `other`'s log, copied under `run_id`'s version 2.
        from stashpoint.stores.objects import GetObject, PutObject

        assert second.logs_in("run-logs").head(run_id).version == 1
        keys = [k for k in _keys(second) if f"/{other}/" in k and k.endswith("2")]
        assert len(keys) == 1
        body = second.driver(GetObject(keys[0], None, 10**7)).body
        second.driver(PutObject(keys[0].replace(other, run_id), body, None))
        with pytest.raises(stashpoint.InvalidPayload):
            first.runs.record_attempt(run_id, "b", 1)


def _keys(stash: Any) -> list[str]:
    from stashpoint.stores.objects import ListKeys

    found: list[str] = []
    token = None
    while True:
        page = stash.driver(ListKeys("", token))
        found.extend(page.keys)
        token = page.next_token
        if token is None:
            return found


def test_a_lost_race_still_ends_in_purged_for_a_purged_log() -> None:
    url = f"memory://state-{uuid.uuid4().hex}"
    with stashpoint.open(url) as first, stashpoint.open(url) as second:
        run_id = first.runs.create_run("race")
        first.runs.record_attempt(run_id, "a", 1)
        second.admin.purge(run=run_id)
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


def test_after_a_one_round_read_misses_the_update_lists_at_once() -> None:
    """Many writers at once: when the version after the lost head is not the head (the log
    went further), the rest of that update reads with a listing straight away, without
    spending two GETs on every lost race."""
    url = f"memory://state-{uuid.uuid4().hex}"
    labels = iter(range(100))
    with stashpoint.open(url) as first, stashpoint.open(url) as second:
        run_id = first.runs.create_run("race")
        first.runs.record_attempt(run_id, "mine-0", 1)  # first knows the head
        second.runs.record_attempt(run_id, f"n{next(labels)}", 1)
        second.runs.record_attempt(run_id, f"n{next(labels)}", 1)  # two ahead
        sent: list[str] = []
        moved: list[bool] = []

        def hook(request: Any, proceed: Any) -> Any:
            sent.append(type(request).__name__)
            result = proceed()
            if type(request).__name__ == "ListKeys" and not moved:
                moved.append(True)  # the head moves once more while first reads it
                second.runs.record_attempt(run_id, f"n{next(labels)}", 1)
            return result

        with first.intercept(hook):
            first.runs.record_attempt(run_id, "mine-1", 1)
    # Refused PUT, the two GETs (a miss), a listing read, a refused PUT, a listing read
    # (no GET pair first), the PUT that lands.
    first_put, second_put = [i for i, name in enumerate(sent) if name == "PutObject"][:2]
    assert sent[first_put + 1 : first_put + 3] == ["GetObject", "GetObject"], sent
    assert sent[second_put + 1] == "ListKeys", sent
    with stashpoint.open(url) as stash:
        assert len(stash.runs.load_run(run_id).attempts) == 5
