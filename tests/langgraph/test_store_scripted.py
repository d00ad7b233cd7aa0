"""The store's write loop driven by scripted storage answers: no server, no network.

Each test plays the exact answers a server gives to one path of `StoreSteps._save`: a new
key, a key another process holds, a stale known head, an item deleted meanwhile, a create
whose answer was lost. Every request is checked in order (`tests/scripted.py`).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from stashpoint import CheckpointConflict, Envelope
from stashpoint.codec import Codec
from stashpoint.langgraph.items import KIND, SCHEMA_VERSION, StoredItem, item_id
from stashpoint.langgraph.store_steps import StoreSteps
from stashpoint.retry import RetryPolicy
from stashpoint.stores.cas import CompareAndSwap, EtagCache
from stashpoint.stores.head_facts import head_metadata
from stashpoint.stores.layout import LANGGRAPH_STORE, Layout
from stashpoint.stores.objects import Create, GetObject, HeadObject, Match, ObjectInfo, PutObject
from tests.scripted import REFUSED, STORED, TIMEOUT, Script

NS = ("memories", "u1")
ID = item_id(NS, "k")
CODEC = Codec()


def _steps() -> StoreSteps:
    retry = RetryPolicy(max_attempts=4, base_delay=0, max_delay=0)
    return StoreSteps(CompareAndSwap(LANGGRAPH_STORE, Layout(), CODEC, retry, EtagCache()))


def _envelope(value: dict[str, Any], base: Envelope | None = None) -> Envelope:
    payload = StoredItem(NS, "k", value, {}, None, None).payload()
    if base is None:
        return Envelope.initial(ID, None, KIND, SCHEMA_VERSION, payload)
    return base.next(payload)


def _head(envelope: Envelope, etag: str) -> ObjectInfo:
    return ObjectInfo(etag=etag, metadata=head_metadata(envelope))


def _body(envelope: Envelope, etag: str) -> ObjectInfo:
    return ObjectInfo(etag=etag, body=CODEC.encode(envelope), metadata=head_metadata(envelope))


def _put(steps: StoreSteps, script: Script, value: dict[str, Any]) -> None:
    script.run(steps.put(NS, "k", value, {}, None))


def test_a_new_key_is_one_create() -> None:
    script = Script([(PutObject, STORED)])
    _put(_steps(), script, {"n": 1})
    assert [p.condition for p in script.puts()] == [Create()]


def test_a_key_another_process_holds_is_updated_on_its_head() -> None:
    theirs = _envelope({"n": 1})
    script = Script(
        [
            (PutObject, REFUSED),  # the create finds the key taken
            (HeadObject, _head(theirs, "etag-theirs")),  # not ours: a conflict
            (GetObject, _body(theirs, "etag-theirs")),  # the update loads the head
            (PutObject, STORED),
        ]
    )
    _put(_steps(), script, {"n": 2})
    create, update = script.puts()
    assert create.condition == Create() and update.condition == Match("etag-theirs")
    assert CODEC.decode(update.body).revision == 1  # built on their revision, not beside it


def test_a_known_item_is_one_put_and_a_stale_one_is_redone_on_the_fresh_head() -> None:
    steps = _steps()
    first = Script([(PutObject, STORED)])
    _put(steps, first, {"n": 1})
    mine = CODEC.decode(first.puts()[0].body)
    second = Script([(PutObject, STORED)])
    _put(steps, second, {"n": 2})
    assert second.puts()[0].condition == Match("etag-new")  # no read before it
    known = CODEC.decode(second.puts()[0].body)
    theirs = known.next(StoredItem(NS, "k", {"n": "theirs"}, {}, None, None).payload())
    third = Script(
        [
            (PutObject, REFUSED),  # another process saved meanwhile
            (HeadObject, _head(theirs, "etag-theirs")),
            (GetObject, _body(theirs, "etag-theirs")),
            (PutObject, STORED),
        ]
    )
    _put(steps, third, {"n": 3})
    assert [CODEC.decode(p.body).revision for p in third.puts()] == [2, 3]
    assert mine.revision == 0


def test_an_item_deleted_meanwhile_is_created_again() -> None:
    steps = _steps()
    _put(steps, Script([(PutObject, STORED)]), {"n": 1})
    script = Script(
        [
            (PutObject, REFUSED),  # If-Match on a deleted key
            (HeadObject, None),  # nothing there: the update's conflict
            (GetObject, None),  # the reload finds no item
            (PutObject, STORED),  # so it is created again
        ]
    )
    _put(steps, script, {"n": 2})
    assert [p.condition for p in script.puts()] == [Match("etag-new"), Create()]


def test_a_create_whose_answer_was_lost_is_judged_not_resent() -> None:
    def landed(request: Any) -> ObjectInfo:
        return _head(CODEC.decode(script.puts()[0].body), "etag-mine")

    script = Script([(PutObject, TIMEOUT), (HeadObject, landed)])
    _put(_steps(), script, {"n": 1})
    assert len(script.puts()) == 1  # it landed: a second PUT would be a second revision


def test_an_update_reads_the_stored_value_first_and_a_none_change_writes_nothing() -> None:
    theirs = _envelope({"n": 1})
    seen: list[Any] = []

    def change(value: Any) -> None:
        seen.append(value)

    script = Script([(GetObject, _body(theirs, "etag-theirs"))])
    found = script.run(_steps().update(NS, "k", change, lambda value: {}, None))
    assert found is None and script.puts() == [] and seen == [{"n": 1}]


def test_an_update_of_an_absent_item_creates_it() -> None:
    script = Script([(GetObject, None), (PutObject, STORED)])
    found = script.run(_steps().update(NS, "k", lambda v: {"n": 1}, lambda value: {}, None))
    assert found is not None and found.item.value == {"n": 1}
    assert [p.condition for p in script.puts()] == [Create()]


def test_an_update_gives_up_after_max_attempts_lost_races() -> None:
    theirs = _envelope({"n": 1})
    newer = theirs.next(StoredItem(NS, "k", {"n": 2}, {}, None, None).payload())
    lost_race = [
        (GetObject, _body(theirs, "etag-1")),
        (PutObject, REFUSED),  # another writer saved first
        (HeadObject, _head(newer, "etag-2")),
    ]
    script = Script(lost_race * 2)
    with pytest.raises(CheckpointConflict):
        script.run(_steps().update(NS, "k", lambda v: {"n": 9}, lambda value: {}, None, 2))
    assert len(script.puts()) == 2  # two attempts, as asked, then the typed conflict


def test_a_put_outlasting_more_lost_races_than_a_save_retries_still_lands() -> None:
    """A put replaces whatever is there: racing puts of one key each land as a revision,
    however many the others landed first (8 writers putting 3 times each lost the retry
    policy's attempts now and then: the winners hold the head and need one PUT, a loser
    two requests)."""
    chain = [_envelope({"n": 0})]
    for n in range(1, 8):
        chain.append(chain[-1].next(StoredItem(NS, "k", {"n": n}, {}, None, None).payload()))
    answers: list[tuple[type[Any], Any]] = [
        (PutObject, REFUSED),  # the create finds the key taken
        (HeadObject, _head(chain[0], "etag-0")),
    ]
    for n in range(6):  # more lost races than the policy's 4 attempts
        answers += [
            (GetObject, _body(chain[n], f"etag-{n}")),
            (PutObject, REFUSED),  # another put landed first
            (HeadObject, _head(chain[n + 1], f"etag-{n + 1}")),
        ]
    answers += [(GetObject, _body(chain[6], "etag-6")), (PutObject, STORED)]
    script = Script(answers)
    _put(_steps(), script, {"n": 99})
    last = script.puts()[-1]
    assert last.condition == Match("etag-6") and CODEC.decode(last.body).revision == 7
