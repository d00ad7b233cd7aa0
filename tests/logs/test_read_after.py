"""`LogSteps.read_after`: the one-round read of a writer that lost a race, scripted.

Bodies are real entries (written on the memory backend); storage's answers to the two GETs
are scripted, so every case of what the loser can find is played exactly.
"""

from __future__ import annotations

import uuid
from typing import Any

import stashpoint
from stashpoint.codec import Codec
from stashpoint.logs.format import LogKeys
from stashpoint.logs.log import LogSteps
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import GetObject, ObjectInfo
from tests.scripted import Script


def _log(states: list[dict[str, Any]], log_id: str = "l") -> tuple[list[Any], list[bytes]]:
    """Write one version per state (patches after the first); return heads and bodies."""
    with stashpoint.open(f"memory://read-after-{uuid.uuid4().hex}") as stash:
        heads: list[Any] = []
        for n, state in enumerate(states):
            after = heads[-1] if heads else None
            heads.append(stash.logs.append(log_id, [f"r{n}"], after=after, state=state))
        keys = LogKeys(stash.layout, "logs")
        bodies = [
            stash.driver(GetObject(keys.entry(log_id, n), None, 10**7)).body
            for n in range(len(states))
        ]
    return heads, bodies


def _steps() -> LogSteps:
    return LogSteps(LogKeys(Layout(), "logs"), Codec(), RetryPolicy())


def _read_after(after: Any, answers: list[Any]) -> tuple[Any, Script]:
    script = Script([(Parallel, answers)])
    return script.run(_steps().read_after(after)), script


def test_the_next_version_with_nothing_after_it_is_the_head_its_patch_applied() -> None:
    heads, bodies = _log([{"a": 1, "b": [1]}, {"a": 2, "b": [1]}, {"a": 2, "c": 3}])
    found, script = _read_after(heads[1], [ObjectInfo(etag="e", body=bodies[2]), None])
    keys = [r.key for r in script.requests[0].requests]
    assert keys[0].endswith(f"{2:020d}") and keys[1].endswith(f"{3:020d}")
    assert found is not None and found.version == 2
    assert found.state == {"a": 2, "c": 3} == heads[2].state
    assert found.next_record == heads[2].next_record and found.write_id == heads[2].write_id
    assert found.kind == heads[2].kind


def test_a_log_that_went_on_or_a_version_not_written_means_a_listing() -> None:
    heads, bodies = _log([{"a": 1}, {"a": 2}, {"a": 3}])
    went_on = [ObjectInfo(etag="e", body=bodies[1]), ObjectInfo(etag="f", body=bodies[2])]
    assert _read_after(heads[0], went_on)[0] is None
    assert _read_after(heads[1], [None, None])[0] is None


def test_a_version_that_does_not_follow_the_lost_head_means_a_listing() -> None:
    """The same log id written twice (another copy): version 1 of the other copy follows
    another write id, so it is not taken as the head."""
    heads, _ = _log([{"a": 1}, {"a": 2}])
    _, other = _log([{"a": 1}, {"z": 9}])
    assert _read_after(heads[0], [ObjectInfo(etag="e", body=other[1]), None])[0] is None


def test_an_ended_version_means_a_listing() -> None:
    with stashpoint.open(f"memory://read-after-{uuid.uuid4().hex}") as stash:
        head = stash.logs.append("l", ["r"], after=None, state={"a": 1})
        stash.logs.delete("l")
        body = stash.driver(GetObject(LogKeys(stash.layout, "logs").entry("l", 1), None, 10**7))
    assert _read_after(head, [body, None])[0] is None


def test_written_after_is_one_listing_after_the_version_and_none_without_seeks() -> None:
    from stashpoint.stores.objects import KeyPage, ListKeys

    for keys, grew in (([], False), (["x"], True)):
        script = Script([(ListKeys, KeyPage(keys=keys, next_token=None))])
        assert script.run(_steps().written_after("l", 7)) is grew
        (request,) = script.requests
        assert request.start_after.endswith(f"/{7:020d}") and request.page_size == 1
    unordered = LogSteps(LogKeys(Layout(), "logs"), Codec(), RetryPolicy(), seeks=False)
    assert Script([]).run(unordered.written_after("l", 7)) is None


def test_list_tops_are_the_newest_versions_of_the_logs_a_page_holds_whole() -> None:
    from stashpoint.stores.objects import KeyPage, ListKeys

    keys = LogKeys(Layout(), "logs")
    first = [keys.entry("a", v) for v in range(3)] + [keys.entry("b", 0), "logs/b/planted"]
    first += [keys.entry("c", v) for v in range(2)]  # cut: the page goes on
    second = [keys.entry("d", 7)]
    script = Script(
        [
            (ListKeys, KeyPage(keys=first, next_token="more")),
            (ListKeys, KeyPage(keys=second, next_token=None)),
        ]
    )
    assert script.run(_steps().list_tops()) == {"a": 2, "b": None, "c": None, "d": 7}
    assert script.requests[1].start_after == "logs/c/~"  # past the rest of c's keys
    unordered = LogSteps(LogKeys(Layout(), "logs"), Codec(), RetryPolicy(), seeks=False)
    pages = Script([(ListKeys, KeyPage(keys=[keys.entry("a", 4)], next_token=None))])
    assert pages.run(unordered.list_tops()) == {"a": None}
