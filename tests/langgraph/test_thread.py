"""A serialized value's stored form (`langgraph.thread.pack`): readable JSON checked once
where it is made, base64 for anything that would not come back as the very same bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.base")

import ormsgpack
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from stashpoint.codec import CheckedJson, check_json
from stashpoint.errors import LimitExceeded
from stashpoint.langgraph.thread import pack, unpack_bytes

SERDE = JsonPlusSerializer()


def test_messages_pack_as_checked_readable_json_that_round_trips() -> None:
    value = [HumanMessage(content="naïve ☃", id="h"), AIMessage(content="", id="a"), {"x": 1.5}]
    type_, data = SERDE.dumps_typed(value)
    packed = pack(type_, data)
    assert isinstance(packed, CheckedJson) and packed["type"] == "msgpack"
    assert packed["msgpack"][0]["__msgpack_ext__"] > 0  # a message: an extension
    assert unpack_bytes(packed, "v") == (type_, data)
    stored = json.loads(json.dumps(packed))  # as a reader gets it back: plain JSON
    assert unpack_bytes(stored, "v") == (type_, data)
    assert check_json({"entry": [packed]}, 64) == check_json({"entry": [stored]}, 64)


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [b"raw bytes", float("nan"), float("inf"), _nested(30)],
    ids=["bytes", "nan", "inf", "too deep"],
)
def test_what_json_cannot_carry_is_base64(value: object) -> None:
    type_, data = SERDE.dumps_typed(value)
    packed = pack(type_, data)
    assert set(packed) == {"type", "base64"}
    assert unpack_bytes(packed, "v") == (type_, data)


def test_msgpack_that_would_not_re_encode_the_same_is_base64() -> None:
    wide = b"\xd1\x00\x01"  # the int 1 as an int16: ormsgpack writes it as one byte
    assert ormsgpack.unpackb(wide) == 1
    packed = pack("msgpack", wide)
    assert set(packed) == {"type", "base64"} and unpack_bytes(packed, "v") == ("msgpack", wide)
    packed = pack("msgpack", b"\xc1")  # never used in msgpack: not decodable
    assert unpack_bytes(packed, "v") == ("msgpack", b"\xc1")


def test_a_checked_value_is_counted_whole_not_walked_again() -> None:
    trusted = CheckedJson({"values": "not walked"}, nodes=7, depth=3)
    assert check_json({"a": [trusted]}, 64) == 1 + 1 + 7
    # Its depth bound still counts where it sits: depth 3 below level 3 passes 5, not 4.
    assert check_json({"a": [trusted]}, 5) == 9
    with pytest.raises(LimitExceeded, match="deeper"):
        check_json({"a": [trusted]}, 4)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=24,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(_JSON, st.dictionaries(st.text(max_size=4), _JSON, max_size=3), st.booleans()),
        max_size=4,
    )
)
def test_readable_values_read_back_as_the_very_same_bytes(
    parts: list[tuple[object, dict[str, object], bool]],
) -> None:
    """Empty and falsy values (0, "", [], {}, False) inside messages and around them come
    back from their readable form, as a reader decodes it, byte for byte."""
    value = [
        AIMessage(content="", id="a", additional_kwargs={"x": plain, **extra})
        if as_message
        else [plain, extra]
        for plain, extra, as_message in parts
    ]
    type_, data = SERDE.dumps_typed(value)
    packed = pack(type_, data)
    assert unpack_bytes(packed, "v") == (type_, data)
    if "msgpack" in packed:
        assert unpack_bytes(json.loads(json.dumps(packed)), "v") == (type_, data)
