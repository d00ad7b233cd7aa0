"""Hostile objects in a log: every one is a typed error naming the object, never a
silently shorter (or longer) log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import zstandard

import stashpoint
from stashpoint import InvalidPayload, LimitExceeded, UnsupportedFormat
from stashpoint.logs import SEGMENT_SPAN
from stashpoint.stores.objects import DeleteObject, GetObject, PutObject


@pytest.fixture(params=["memory_url", "local_url"])
def stash(request: pytest.FixtureRequest) -> Iterator[stashpoint.Stash]:
    url, options = request.getfixturevalue(request.param)
    with stashpoint.open(url, **options) as opened:
        yield opened


def _log(stash: stashpoint.Stash, log_id: str, versions: int) -> None:
    head = None
    for v in range(versions):
        head = stash.logs.append(log_id, [f"r{v}"], after=head, state={"v": v})


def _put(stash: stashpoint.Stash, key: str, document: dict[str, Any] | bytes) -> None:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    stash.driver(PutObject(key, zstandard.compress(body), None))


def _document(stash: stashpoint.Stash, key: str) -> dict[str, Any]:
    info = stash.driver(GetObject(key))
    return json.loads(zstandard.decompress(info.body))  # type: ignore[no-any-return]


def _raises(stash: stashpoint.Stash, log_id: str, error: type[Exception], key: str) -> None:
    for read in (
        lambda: stash.logs.records(log_id),
        lambda: stash.logs.head(log_id),
        lambda: stash.logs.tail(log_id, 10_000),
    ):
        with pytest.raises(error) as info:
            read()
        assert info.value.object_name == key, info.value  # type: ignore[attr-defined]


def test_a_missing_entry_in_the_middle_is_named(stash: stashpoint.Stash) -> None:
    _log(stash, "holey", 5)
    key = stash.logs.steps.keys.entry("holey", 2)
    stash.driver(DeleteObject(key))
    with pytest.raises(InvalidPayload, match="version 2") as info:
        stash.logs.records("holey")
    above = stash.logs.steps.keys.entry("holey", 3)  # the object above the gap is named
    assert info.value.object_name == above and above in str(info.value)
    assert "stashpoint repair logs holey" in str(info.value)
    with pytest.raises(InvalidPayload):
        stash.logs.tail("holey", 100)
    with pytest.raises(InvalidPayload):  # its state is folded from version 0: refused too
        stash.logs.head("holey")


def test_a_segment_whose_range_overlaps_the_format_is_named(stash: stashpoint.Stash) -> None:
    _log(stash, "overlap", 3)
    keys = stash.logs.steps.keys
    bad = f"{keys.segments_prefix('overlap')}{1:020d}-{SEGMENT_SPAN:020d}"
    _put(stash, bad, {"format": "stashpoint.log/1", "type": "segment", "log": "overlap"})
    _raises(stash, "overlap", InvalidPayload, bad)


def test_an_entry_from_another_log_is_named(stash: stashpoint.Stash) -> None:
    _log(stash, "mine", 3)
    _log(stash, "theirs", 3)
    keys = stash.logs.steps.keys
    target = keys.entry("mine", 2)
    _put(stash, target, _document(stash, keys.entry("theirs", 2)))
    _raises(stash, "mine", InvalidPayload, target)


def test_a_future_format_is_named(stash: stashpoint.Stash) -> None:
    _log(stash, "future", 2)
    key = stash.logs.steps.keys.entry("future", 1)
    document = _document(stash, key)
    document["format"] = "stashpoint.log/9"
    _put(stash, key, document)
    _raises(stash, "future", UnsupportedFormat, key)


def test_an_entry_under_another_versions_key_is_named(stash: stashpoint.Stash) -> None:
    _log(stash, "moved", 3)
    keys = stash.logs.steps.keys
    _put(stash, keys.entry("moved", 2), _document(stash, keys.entry("moved", 1)))
    _raises(stash, "moved", InvalidPayload, keys.entry("moved", 2))


def test_an_entry_whose_records_do_not_follow_is_refused(stash: stashpoint.Stash) -> None:
    _log(stash, "skips", 3)
    keys = stash.logs.steps.keys
    document = _document(stash, keys.entry("skips", 1))
    document["records"] = ["r1", "smuggled"]
    _put(stash, keys.entry("skips", 1), document)
    with pytest.raises(InvalidPayload, match="missing or repeated"):
        stash.logs.records("skips")


def test_a_segment_with_a_short_or_renumbered_entry_list_is_named(
    stash: stashpoint.Stash,
) -> None:
    _log(stash, "sealed", SEGMENT_SPAN + 1)  # seals 0..63
    keys = stash.logs.steps.keys
    segment = keys.segment("sealed", 0)
    document = _document(stash, segment)
    for v in range(SEGMENT_SPAN):  # only the segment can answer now
        stash.driver(DeleteObject(keys.entry("sealed", v)))
    shorter = {**document, "entries": document["entries"][:-1]}
    _put(stash, segment, shorter)
    with pytest.raises(InvalidPayload, match="must hold 64 entries") as info:
        stash.logs.records("sealed")
    assert info.value.object_name == segment
    renumbered = json.loads(json.dumps(document))
    renumbered["entries"][5]["version"] = 6
    _put(stash, segment, renumbered)
    with pytest.raises(InvalidPayload, match="version 6, expected 5"):
        stash.logs.records("sealed")


def test_a_zstd_bomb_entry_is_refused_before_it_inflates(stash: stashpoint.Stash) -> None:
    _log(stash, "bomb", 2)
    key = stash.logs.steps.keys.entry("bomb", 1)
    # 8 MiB from a few hundred bytes: far past the inflation ratio the limits allow.
    payload = b'{"format":"stashpoint.log/1","records":["' + b"A" * (8 << 20) + b'"]}'
    stash.driver(PutObject(key, zstandard.compress(payload), None))
    _raises(stash, "bomb", LimitExceeded, key)


def test_a_stray_object_among_entries_is_named(stash: stashpoint.Stash) -> None:
    _log(stash, "stray", 2)
    stray = stash.logs.steps.keys.entries_prefix("stray") + "notes.txt"
    _put(stash, stray, b"{}")
    _raises(stash, "stray", InvalidPayload, stray)


def test_an_agent_log_with_a_broken_transcript_position_is_named(
    stash: stashpoint.Stash,
) -> None:
    from stashpoint.agent import AgentCheckpoint, AgentRunner, ModelRef
    from stashpoint.agent.logic import AgentStorage

    handle = AgentCheckpoint.existing("agent", stash.checkpoints)
    AgentRunner(handle).start(agent="a", model=ModelRef(provider="p", name="m"), transcript=[])
    logs = AgentStorage.of(stash.checkpoints.steps).logs
    key = logs.keys.entry("agent", 0)
    document = _document(stash, key)
    document["state"]["transcript_length"] = 5  # claims messages that are not there
    _put(stash, key, document)
    with pytest.raises(InvalidPayload, match="transcript") as info:
        handle.load()
    assert info.value.object_name == key


def test_patches_are_stored_small_and_a_patch_without_a_base_is_refused(
    stash: stashpoint.Stash,
) -> None:
    head = stash.logs.append("patched", [], after=None, state={"big": "x" * 300, "n": 0})
    for n in range(1, 18):
        head = stash.logs.append("patched", [n], after=head, state={"big": "x" * 300, "n": n})
    keys = stash.logs.steps.keys
    first = _document(stash, keys.entry("patched", 1))
    assert first["patch"] == {"n": 1} and "state" not in first  # only what changed
    assert "state" in _document(stash, keys.entry("patched", 16))  # a whole state every 16
    # A full-state version turned into a patch leaves nothing to fold from: refused.
    document = _document(stash, keys.entry("patched", 16))
    document["patch"] = document.pop("state")
    _put(stash, keys.entry("patched", 0), {**document, "version": 0, "first_record": 0,
                                          "records": []})  # fmt: skip
    with pytest.raises(InvalidPayload, match="patch"):
        stash.logs.records("patched")


def test_sealed_segments_are_compressed_harder_than_entries(stash: stashpoint.Stash) -> None:
    text = "".join(f"def f{n}(x):\n    return x * {n}\n" for n in range(40))
    head = None
    for v in range(SEGMENT_SPAN + 1):
        head = stash.logs.append("dense", [f"{v}: {text}"], after=head)
    segment = stash.driver(GetObject(stash.logs.steps.keys.segment("dense", 0)))
    raw = zstandard.decompress(segment.body)
    # Written once and kept for years: zstd level 9 (entries use the stash's level, 3).
    at_nine = zstandard.ZstdCompressor(level=9, write_checksum=True, write_content_size=True)
    assert segment.body == at_nine.compress(raw)


def _sealed_log(url: str, log_id: str, versions: int, **options: Any) -> None:
    with stashpoint.open(url, **options) as stash:
        head = None
        for v in range(versions):
            head = stash.logs.append(log_id, [f"r{v}"], after=head, state={"v": v})


@pytest.mark.parametrize(
    "planted",
    ["torn", "not a log", "another log's segment", "the same log, other records"],
)
def test_no_planted_segment_makes_a_seal_vacate_a_good_entry(
    memory_url: tuple[str, dict[str, Any]], planted: str
) -> None:
    """Issue 23 #5: a 412 on the segment was taken as "already sealed" unread, and
    clean-up then deleted every entry; a well-formed segment with other records was
    preferred over the entries. Now the object is judged by its content and replaced."""
    url = memory_url[0]
    with stashpoint.open(url, vacate_sealed_entries=True) as stash:
        keys = stash.logs.steps.keys
        segment = keys.segment("victim", 0)
        if planted == "torn":
            body = b"\x28\xb5\x2f\xfd torn"
        elif planted == "not a log":
            body = zstandard.compress(b'{"format": "stashpoint.log/1", "type": "segment"}')
        else:
            # A real segment: of another log, or of this log id written elsewhere.
            other = "other" if planted == "another log's segment" else "victim"
            with stashpoint.open(f"memory://elsewhere-{planted.replace(' ', '-')}") as elsewhere:
                head = None
                for v in range(SEGMENT_SPAN + 1):
                    head = elsewhere.logs.append(other, [f"x{v}"], after=head, state={"x": v})
                info = elsewhere.driver(GetObject(elsewhere.logs.steps.keys.segment(other, 0)))
                body = info.body
        stash.driver(PutObject(segment, body, None))  # before the seal
        head = None
        for v in range(SEGMENT_SPAN + 1):
            head = stash.logs.append("victim", [f"r{v}"], after=head, state={"v": v})
        assert stash.logs.records("victim") == [f"r{v}" for v in range(SEGMENT_SPAN + 1)]
        assert _document(stash, segment)["log"] == "victim"
        assert [e["records"] for e in _document(stash, segment)["entries"]] == [
            [f"r{v}"] for v in range(SEGMENT_SPAN)
        ]


def test_a_segment_of_another_copy_of_the_log_is_named_not_read(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """A well-formed segment with other records planted after sealing: the write ids
    chain (`prev`) does not join, so reads refuse it instead of preferring it."""
    url = memory_url[0]
    _sealed_log(url, "chained", SEGMENT_SPAN + 2)
    with stashpoint.open("memory://another-copy") as elsewhere:
        head = None
        for v in range(SEGMENT_SPAN + 1):
            head = elsewhere.logs.append("chained", [f"r{v}"], after=head, state={"v": v})
        body = elsewhere.driver(GetObject(elsewhere.logs.steps.keys.segment("chained", 0))).body
    with stashpoint.open(url) as stash:
        segment = stash.logs.steps.keys.segment("chained", 0)
        stash.driver(PutObject(segment, body, None))
        with pytest.raises(InvalidPayload, match="not one log"):
            stash.logs.records("chained")
