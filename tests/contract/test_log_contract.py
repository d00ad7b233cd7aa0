"""The append-only log contract, on every backend and both drivers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidArgument,
    InvalidId,
    InvalidPayload,
)
from stashpoint.logs import SEGMENT_SPAN
from stashpoint.steps import run_sync
from stashpoint.stores.objects import GetObject, every_key_page
from tests.contract.conftest import BACKENDS, DRIVERS, UNSUPPORTED, _open

LOG_BACKENDS = [*BACKENDS, "s3_dynamo_url"]
"""Logs need no index, but a stash with one must serve them the same."""


@pytest.fixture(
    params=[(b, d) for b in LOG_BACKENDS for d in DRIVERS if (b, d) not in UNSUPPORTED],
    ids=lambda p: f"{p[0].removesuffix('_url')}-{p[1]}",
)
def log_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], str]:
    name, driver = request.param
    url, options = request.getfixturevalue(name)
    return url, options, driver


@pytest.fixture
def stash(log_backend: tuple[str, dict[str, Any], str]) -> Iterator[Any]:
    """The stash under test (this module's backends), sync or async behind a facade."""
    yield from _open(*log_backend)


@pytest.fixture
def other_stash(log_backend: tuple[str, dict[str, Any], str]) -> Iterator[Any]:
    """A second, independent stash on the same storage (a new process's view)."""
    url, options, _ = log_backend
    with stashpoint.open(url, **options) as other:
        yield other


def _fill(logs: Any, log_id: str, versions: int) -> Any:
    """Append `versions` versions, version v holding records [v*10, v*10 + v % 3)."""
    head = None
    for v in range(versions):
        records = [v * 10 + i for i in range(v % 3)]
        head = logs.append(log_id, records, after=head, state={"v": v})
    return head


def _expected_records(versions: int) -> list[int]:
    return [v * 10 + i for v in range(versions) for i in range(v % 3)]


def test_append_read_tail_and_history(stash: Any) -> None:
    logs = stash.logs
    log_id = f"log-{stashpoint.new_id()}"
    versions = 2 * SEGMENT_SPAN + 5  # two sealed segments and a tail of entries
    head = _fill(logs, log_id, versions)
    assert head.version == versions - 1 and head.next_record == len(_expected_records(versions))
    again = logs.head(log_id)
    assert (again.version, again.next_record, again.state) == (
        head.version,
        head.next_record,
        {"v": versions - 1},
    )
    assert logs.records(log_id) == _expected_records(versions)
    assert logs.records(log_id, 100) == _expected_records(versions)[100:]
    tail_head, last = logs.tail(log_id, 7)
    assert tail_head.version == head.version and last == _expected_records(versions)[-7:]
    assert logs.tail(log_id, 0)[1] == []
    # Any earlier version, with its state, reads like the latest: no S3 versioning needed.
    [old] = logs.entries(log_id, 4, 4)
    assert old.version == 4 and old.state == {"v": 4} and old.records == [40]
    window = logs.entries(log_id, SEGMENT_SPAN - 2, SEGMENT_SPAN + 1)
    assert [e.version for e in window] == list(range(SEGMENT_SPAN - 2, SEGMENT_SPAN + 2))
    with pytest.raises(CheckpointNotFound):
        logs.entries(log_id, 0, versions + 3)
    assert log_id in logs.list_ids("log-")


def test_two_appends_after_one_head_one_wins_and_the_loser_learns_the_winner(
    stash: Any,
) -> None:
    logs = stash.logs
    log_id = f"race-{stashpoint.new_id()}"
    head = logs.append(log_id, ["a"], after=None, state=1)
    winner = logs.append(log_id, ["b"], after=head, state=2)
    with pytest.raises(CheckpointConflict) as info:
        logs.append(log_id, ["c"], after=head, state=3)
    assert info.value.actual_revision == winner.version == 1
    assert info.value.kind is stashpoint.ErrorKind.CONFLICT
    with pytest.raises(CheckpointConflict):
        logs.append(log_id, ["again"], after=None)  # create-only
    assert logs.records(log_id) == ["a", "b"] and logs.head(log_id).state == 2


def test_bad_input_is_refused_before_anything_is_stored(stash: Any) -> None:
    logs = stash.logs
    with pytest.raises(InvalidId):
        logs.append("../escape", [1], after=None)
    with pytest.raises(InvalidId):
        logs.head("a/b")
    log_id = f"bad-{stashpoint.new_id()}"
    head = logs.append(log_id, [1], after=None)
    with pytest.raises(InvalidPayload):
        logs.append(log_id, [{1, 2}], after=head)  # a set is not JSON
    with pytest.raises(InvalidPayload):
        logs.append(log_id, [float("nan")], after=head)
    with pytest.raises(InvalidArgument):
        logs.append(log_id, "not a list", after=head)  # type: ignore[arg-type]
    assert logs.records(log_id) == [1] and logs.head(log_id).version == 0
    with pytest.raises(CheckpointNotFound):
        logs.head(f"never-{stashpoint.new_id()}")


@pytest.fixture(params=[True, False], ids=["vacating", "keeping"])
def eager(
    log_backend: tuple[str, dict[str, Any], str], request: pytest.FixtureRequest
) -> Iterator[tuple[Any, Any]]:
    """(stash under test, raw sync stash over the same storage), vacating sealed entries
    or keeping them whole."""
    url, options, driver = log_backend
    options = {**options, "vacate_sealed_entries": request.param}
    with stashpoint.open(url, **options) as raw:
        for stash in _open(url, options, driver):
            yield stash, raw


def _keys(raw: Any, prefix: str) -> list[str]:
    """Every key under `prefix`, in key order (a directory bucket lists in none)."""
    return sorted(run_sync(every_key_page(prefix), raw.driver)[0].keys)


def _kinds(raw: Any, prefix: str) -> list[str]:
    """The type of every object under `prefix` (`entry`, `vacated`, `segment`), in order."""
    kinds = []
    for key in _keys(raw, prefix):
        body = raw.driver(GetObject(key)).body
        kinds.append(json.loads(raw.codec.unwrap(body, name=key))["type"])
    return kinds


def test_sealed_entries_are_vacated_or_kept_and_reads_do_not_notice(eager: tuple[Any, Any]) -> None:
    stash, raw = eager
    log_id = f"clean-{stashpoint.new_id()}"
    versions = 2 * SEGMENT_SPAN + 1
    _fill(stash.logs, log_id, versions)  # the last append seals and vacates
    keys = raw.logs.steps.keys
    # Both segments exist; every sealed entry is a marker (its key stays occupied) or,
    # kept, whole; the entry no segment holds is whole.
    assert len(_keys(raw, keys.segments_prefix(log_id))) == 2
    sealed = "vacated" if raw.logs.steps.vacate_sealed else "entry"
    assert _kinds(raw, keys.entries_prefix(log_id)) == [sealed] * (versions - 1) + ["entry"]
    assert stash.logs.records(log_id) == _expected_records(versions)
    assert stash.logs.tail(log_id, 3)[1] == _expected_records(versions)[-3:]
    assert stash.logs.seal(log_id) == 0  # nothing more to seal: idempotent


def test_a_zombie_append_into_a_vacated_range_is_a_conflict_not_a_phantom(
    eager: tuple[Any, Any],
) -> None:
    """A writer that learned a head long ago appends into a version clean-up vacated."""
    stash, raw = eager
    logs = stash.logs
    log_id = f"zombie-{stashpoint.new_id()}"
    stale = logs.append(log_id, ["first"], after=None)
    head = stale
    for v in range(1, SEGMENT_SPAN + 1):
        head = logs.append(log_id, [v], after=head)  # seals 0..63 and vacates them
    with pytest.raises(CheckpointConflict):
        logs.append(log_id, ["phantom"], after=stale)
    assert logs.records(log_id) == ["first", *range(1, SEGMENT_SPAN + 1)]
    sealed = "vacated" if raw.logs.steps.vacate_sealed else "entry"
    assert _kinds(raw, raw.logs.steps.keys.entry(log_id, 1)) == [sealed]  # no phantom


def test_delete_vacates_every_entry_and_a_late_writer_loses(stash: Any) -> None:
    log_id = f"gone-{stashpoint.new_id()}"
    stale = stash.logs.append(log_id, [0], after=None, state={"n": 0})
    head = stale
    for n in range(1, SEGMENT_SPAN + 2):
        head = stash.logs.append(log_id, [n], after=head, state={"n": n})
    assert stash.logs.delete(log_id) >= 2  # the unsealed entries and the segment
    with pytest.raises(CheckpointNotFound):
        stash.logs.head(log_id)
    # A writer holding any head of the deleted log (the latest, or a stale one) loses.
    for late in (head, stale):
        with pytest.raises(CheckpointConflict):
            stash.logs.append(log_id, ["late"], after=late, state={"n": -1})
    with pytest.raises(CheckpointNotFound):
        stash.logs.records(log_id)


def test_a_deleted_log_created_again_starts_a_new_life(stash: Any) -> None:
    log_id = f"again-{stashpoint.new_id()}"
    head = stash.logs.append(log_id, ["old"], after=None, state={"life": 1})
    for n in range(20):
        head = stash.logs.append(log_id, [f"old-{n}"], after=head, state={"life": 1, "n": n})
    stash.logs.delete(log_id)
    first = stash.logs.append(log_id, ["new"], after=None, state={"life": 2})
    assert first.version == 22 and first.next_record == 1  # versions go on, records restart
    second = stash.logs.append(log_id, ["newer"], after=first, state={"life": 2, "n": 1})
    assert stash.logs.records(log_id) == ["new", "newer"]
    assert stash.logs.head(log_id).state == {"life": 2, "n": 1}
    assert [e.version for e in stash.logs.entries(log_id)] == [22, 23]
    assert stash.logs.tail(log_id, 5)[1] == ["new", "newer"]
    with pytest.raises(CheckpointConflict):
        stash.logs.append(log_id, ["late"], after=head)  # the old life's head
    del second


def test_small_state_changes_are_stored_as_patches_and_read_whole(stash: Any) -> None:
    from stashpoint.logs.format import FULL_STATE_EVERY

    logs = stash.logs
    log_id = f"patch-{stashpoint.new_id()}"
    base = {"agent": "a" * 200, "phase": "ready", "turns": 0, "gone": True}
    head = logs.append(log_id, [], after=None, state=base)
    states = [base]
    for v in range(1, FULL_STATE_EVERY + 3):
        state = {"agent": "a" * 200, "phase": "flight" if v % 2 else "ready", "turns": v}
        head = logs.append(log_id, [v], after=head, state=state)
        states.append(state)
    assert logs.head(log_id).state == states[-1]
    # Every version's whole state reads back, whichever way it was stored.
    assert [e.state for e in logs.entries(log_id)] == states
    assert [e.state for e in logs.entries(log_id, 5, 6)] == states[5:7]


def test_tails_of_every_length_fold_patches_from_a_whole_state(stash: Any) -> None:
    """A tail's first read starts wherever the records are; its states must still fold."""
    logs = stash.logs
    log_id = f"tails-{stashpoint.new_id()}"
    head = None
    for v in range(40):  # no sealed segment: every state comes from entries and patches
        head = logs.append(log_id, [v], after=head, state={"v": v, "fixed": "x"})
    for count in (1, 3, 7, 17, 23, 40, 41):
        tail_head, records = logs.tail(log_id, count)
        assert records == list(range(40))[-count:]
        assert tail_head.state == {"v": 39, "fixed": "x"}


def test_a_state_changed_in_place_is_still_stored_as_changed(stash: Any) -> None:
    """The natural pattern: take the head's state, change it, append after that head."""
    logs = stash.logs
    log_id = f"inplace-{stashpoint.new_id()}"
    head = logs.append(log_id, [], after=None, state={"n": 0, "tags": []})
    for n in range(1, 5):
        state = head.state
        state["n"] = n  # mutates the dict the head holds
        state["tags"].append(n)
        head = logs.append(log_id, [n], after=head, state=state)
    assert [e.state["n"] for e in logs.entries(log_id)] == [0, 1, 2, 3, 4]
    assert logs.head(log_id).state == {"n": 4, "tags": [1, 2, 3, 4]}


def test_a_seal_stores_what_was_appended_not_what_the_caller_changed_since(
    stash: Any, other_stash: Any
) -> None:
    """The in-place pattern across a seal. The sealing process keeps what it appended to
    spare the seal its GETs; it once kept the caller's own objects, so the state of
    version 0 (a full state) was sealed as changed 63 appends later: a new process read
    `n == 64` there. Records changed after their append are the same case."""
    logs = stash.logs
    log_id = f"sealed-inplace-{stashpoint.new_id()}"
    records: list[dict[str, Any]] = [{"r": 0}]
    head = logs.append(log_id, records, after=None, state={"n": 0, "tags": []})
    for n in range(1, SEGMENT_SPAN + 6):  # the append of version 64 seals 0..63
        records[0]["r"] = -1  # the caller reuses its record objects
        records = [{"r": n}]
        state = head.state
        state["n"] = n
        state["tags"].append(n)
        head = logs.append(log_id, records, after=head, state=state)
    expected = list(range(SEGMENT_SPAN + 6))
    for reader in (logs, other_stash.logs):  # the writer's own reads, and a new process's
        entries = reader.entries(log_id)
        assert [e.state["n"] for e in entries] == expected
        assert [e.state["tags"] for e in entries] == [expected[1 : n + 1] for n in expected]
        assert [e.records for e in entries] == [[{"r": n}] for n in expected]
