"""Clean-up never frees a key: a stale writer, whatever the clocks say, loses its append."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import stashpoint
from stashpoint import CheckpointConflict
from stashpoint.logs import SEGMENT_SPAN
from stashpoint.logs import log as log_module


class _TwoHoursAhead(datetime):
    """A cleaner whose clock runs two hours ahead of storage's."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.now(UTC) + timedelta(hours=2)


@pytest.mark.parametrize("vacate", [True, False])
def test_a_cleaner_with_a_fast_clock_never_lets_a_fresh_head_recreate_a_version(
    monkeypatch: pytest.MonkeyPatch, vacate: bool
) -> None:
    """Issue 23 #4: clean-up judged entry age on its own clock; a writer whose head was
    fresh (so it skipped the phantom check) re-created a deleted version, acknowledged
    and invisible. Clean-up now never frees a key, and consults no clock."""
    monkeypatch.setattr(log_module, "datetime", _TwoHoursAhead, raising=False)
    url = f"memory://vacate-{uuid.uuid4().hex}"
    with stashpoint.open(url, vacate_sealed_entries=vacate) as stash:
        log_id = "fast-clock"
        heads = [stash.logs.append(log_id, [0], after=None)]
        for n in range(1, SEGMENT_SPAN + 2):
            heads.append(stash.logs.append(log_id, [n], after=heads[-1]))  # seals 0..63
        with pytest.raises(CheckpointConflict):
            stash.logs.append(log_id, ["phantom"], after=heads[5])  # a fresh-enough head
        assert stash.logs.records(log_id) == list(range(SEGMENT_SPAN + 2))


def test_a_reader_that_meets_a_marker_reads_the_segment_instead() -> None:
    url = f"memory://vacate-{uuid.uuid4().hex}"
    with stashpoint.open(url, vacate_sealed_entries=True) as stash:
        head = None
        for n in range(SEGMENT_SPAN + 1):
            head = stash.logs.append("m", [n], after=head, state={"n": n})
        # Every way to read a sealed version: whole log, a range, one version, a tail.
        assert stash.logs.records("m") == list(range(SEGMENT_SPAN + 1))
        assert [e.records for e in stash.logs.entries("m", 3, 5)] == [[3], [4], [5]]
        assert stash.logs.tail("m", 70)[1] == list(range(SEGMENT_SPAN + 1))
