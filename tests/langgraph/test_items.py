"""A store item's id, payload and rules, without storage (`stashpoint.langgraph.items`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

pytest.importorskip("langgraph.store.base")

from stashpoint import InvalidArgument, InvalidPayload
from stashpoint.ids import validate_id
from stashpoint.langgraph.items import (
    StoredItem,
    check_filter,
    cosine_scores,
    expiry,
    item_id,
    matches,
    namespace_matches,
    namespace_prefix_id,
    parse_item_id,
    refresh_slack,
    stored_item,
)

labels = st.text(min_size=1, max_size=12).filter(lambda label: "." not in label)
namespaces = st.lists(labels, min_size=1, max_size=4).map(tuple)
keys = st.text(max_size=20)


@given(namespaces, keys)
def test_an_id_names_its_namespace_and_key_and_nothing_else(
    namespace: tuple[str, ...], key: str
) -> None:
    try:
        object_id = item_id(namespace, key)
    except InvalidArgument:  # too long once escaped: refused, never cut short
        assume(False)
    assert validate_id(object_id) == object_id  # one object key, one file name
    assert parse_item_id(object_id) == (namespace, key)


@given(namespaces, keys, namespaces)
def test_a_namespace_prefix_selects_exactly_the_namespaces_below_it(
    namespace: tuple[str, ...], key: str, prefix: tuple[str, ...]
) -> None:
    below = namespace[: len(prefix)] == prefix
    try:
        object_id = item_id(namespace, key)
    except InvalidArgument:
        assume(False)
    assert object_id.startswith(namespace_prefix_id(prefix)) == below


def test_an_id_too_long_once_escaped_is_refused() -> None:
    assert len(item_id(("a",), "k" * 252)) == 255  # "a", ".", ".", the key
    with pytest.raises(InvalidArgument, match="characters"):
        item_id(("日本語",), "k" * 230)  # 9 characters per label character


@pytest.mark.parametrize("text", ["x", "a..", "..b", "a.b", "a..:zz", "a..:e2:82"])
def test_ids_no_item_has_parse_to_none_or_to_what_they_say(text: str) -> None:
    parsed = parse_item_id(text)
    assert parsed is None or item_id(*parsed) == text


def _payload(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"namespace": ["m", "u"], "key": "k", "value": {"v": 1}}
    document.update(changes)
    return document


@pytest.mark.parametrize(
    "payload",
    [
        [],
        _payload(value=[1]),
        _payload(namespace="m.u"),
        _payload(key="other"),  # copied under another item's id
        _payload(namespace=["m", "other"]),
        _payload(vectors={"text": ["x"]}),
        _payload(vectors={"text": [True]}),
        _payload(ttl_minutes=5),  # a TTL without its expiry
        _payload(ttl_minutes=-1, expires_at="2026-01-01T00:00:00+00:00"),
        _payload(ttl_minutes=5, expires_at="2026-01-01T00:00:00"),  # no zone
        _payload(ttl_minutes=5, expires_at="soon"),
    ],
)
def test_a_malformed_or_misplaced_payload_is_refused(payload: Any) -> None:
    with pytest.raises(InvalidPayload):
        stored_item(item_id(("m", "u"), "k"), payload)


def test_a_payload_round_trips() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    item = StoredItem(("m", "u"), "k", {"v": 1}, {}, 10.0, expiry(now, 10.0))
    again = stored_item(item_id(("m", "u"), "k"), item.payload())
    assert again.payload() == item.payload()


def test_expiry_is_never_early_and_a_refresh_happens_once_per_slack() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ttl = 10.0
    item = StoredItem(("m",), "k", {}, {}, ttl, expiry(now, ttl))
    assert refresh_slack(ttl) == timedelta(minutes=1)
    assert refresh_slack(1.0) == timedelta(seconds=6)
    assert not item.expired(now + timedelta(minutes=ttl))  # never earlier than asked
    assert item.expired(now + timedelta(minutes=ttl) + refresh_slack(ttl))
    assert not item.needs_refresh(now + timedelta(seconds=59))
    assert item.needs_refresh(now + timedelta(seconds=61))
    refreshed = item.refreshed(now + timedelta(minutes=5))
    assert not refreshed.expired(now + timedelta(minutes=14))


@pytest.mark.parametrize(
    ("value", "wanted", "expected"),
    [
        ({"a": 1}, {"a": 1}, True),
        ({"a": 1}, {"a": True}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": 1.0}, {"a": 1}, True),
        ({"a": {"b": 2}}, {"a": {"b": 2}}, True),
        ({"a": {"b": 2}}, {"a.b": 2}, True),
        ({"a.b": 3, "a": {"b": 2}}, {"a.b": 3}, True),  # a key with dots first
        ({"a": [1, 2]}, {"a": [1, 2]}, True),
        ({"a": [1, 2]}, {"a": [1]}, False),
        ({"a": "b"}, {"a": {"$gt": "a"}}, True),
        ({"a": "1"}, {"a": {"$gt": 0}}, False),
        ({"a": 10**400}, {"a": {"$gt": 1e308}}, True),
        ({}, {"a": {"$ne": 1}}, True),
        ({}, {"a": None}, False),
        ({"a": None}, {"a": None}, True),
    ],
)
def test_filters(value: dict[str, Any], wanted: dict[str, Any], expected: bool) -> None:
    assert matches(value, check_filter(wanted)) is expected


def test_unknown_filter_operators_are_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"\$in"):
        check_filter({"a": {"$in": [1]}})
    with pytest.raises(InvalidArgument):
        check_filter(["a"])


def test_namespace_matching() -> None:
    assert namespace_matches(("a", "b", "c"), "prefix", ("a", "*"))
    assert namespace_matches(("a", "b", "c"), "suffix", ("*", "c"))
    assert not namespace_matches(("a",), "prefix", ("a", "b"))
    with pytest.raises(InvalidArgument):
        namespace_matches(("a",), "infix", ("a",))


def test_cosine_scores_with_and_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    vectors = [[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [1.0, 1.0]]
    with_numpy = cosine_scores([1.0, 0.0], vectors)
    import builtins

    real_import = builtins.__import__

    def no_numpy(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "numpy":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_numpy)
    plain = cosine_scores([1.0, 0.0], vectors)
    assert plain == pytest.approx(with_numpy) == [1.0, 0.0, 0.0, 2**-0.5]
