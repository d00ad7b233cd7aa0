"""JSON text: the light engine (the standard library) behaves exactly as the reference.

The reference is pydantic_core; which engine `parse`/`write` pick depends on what the
process has loaded (this one has pydantic_core), so the engines are tested directly, and
the pick in fresh interpreters (tests/test_import.py).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stashpoint import InvalidPayload, jsontext
from stashpoint.codec import Codec, check_json
from stashpoint.envelope import Envelope

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)

_ODD_BYTES = [
    b"\\", b"u", b"d", b"8", b"c", b"0", b'"', b"{", b"}", b"[", b"]", b",", b":", b"NaN",
    b"Infinity", b"-", b"e", b"1e400", b"\xff", b"\xed\xa0\x80", b"\x00", b"\x1f", b"\xef\xbb\xbf",
    b" ", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"9" * 4301, b"[" * 210,
]  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values, NaN equal to NaN, and an int never equal to a float."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "value", parse(raw)
    except ValueError as exc:
        return "error", str(exc)


def _agree(raw: bytes) -> None:
    ours, reference = _outcome(jsontext.parse_light, raw), _outcome(pydantic_core.from_json, raw)
    assert ours[0] == reference[0], raw[:200]
    if ours[0] == "value":
        assert _same(ours[1], reference[1]), raw[:200]
    else:
        assert ours[1] == reference[1]  # the reference words every error


@settings(max_examples=300)
@given(VALUES, st.sampled_from(["compact", "ascii", "spaced", "reference"]))
def test_parse_agrees_with_the_reference_on_valid_documents(value: Any, style: str) -> None:
    if style == "reference":
        raw = pydantic_core.to_json(value)
    else:
        separators = (", ", ": ") if style == "spaced" else (",", ":")
        raw = json.dumps(value, ensure_ascii=style == "ascii", separators=separators).encode()
    _agree(raw)


@settings(max_examples=500)
@given(
    VALUES,
    st.lists(
        st.tuples(st.integers(min_value=0), st.sampled_from(_ODD_BYTES), st.booleans()),
        min_size=1,
        max_size=3,
    ),
)
def test_parse_agrees_with_the_reference_on_mutated_documents(
    value: Any, edits: list[tuple[int, bytes, bool]]
) -> None:
    raw = json.dumps(value, ensure_ascii=True).encode()
    for at, odd, replace in edits:
        at %= len(raw) + 1
        raw = raw[:at] + odd + raw[at + (1 if replace else 0) :]
    _agree(raw)


@pytest.mark.parametrize("depth", [1, 199, 200, 201, 202, 400, 2000])
@pytest.mark.parametrize("shape", ["list", "object"])
def test_parse_agrees_with_the_reference_at_every_depth(depth: int, shape: str) -> None:
    raw = ("[" * depth + "]" * depth) if shape == "list" else ('{"a":' * depth + "1" + "}" * depth)
    _agree(raw.encode())


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":NaN}', b'{"a":-Infinity}', b'{"a":1e400}', b'{"a":"\\ud800"}', b'{"a":"\\udc00x"}',
        b'{"a":"\\ud83d\\ude00"}', b'{"a":"\xed\xa0\x80"}', b'{"a":"\xff"}', b'\xef\xbb\xbf{}',
        b'{"a":1} x', b'{"a":01}', b'{"a":[1,]}', b'{"a":1,"a":2}', b"-0", b"  {}  ", b"",
        b'{"a":' + b"9" * 4300 + b"}", b'{"a":-' + b"9" * 4301 + b"}", b'{"\\u0000":"\\u2028"}',
    ],
)  # fmt: skip
def test_parse_agrees_with_the_reference_on_edge_cases(raw: bytes) -> None:
    _agree(raw)


@settings(max_examples=200)
@given(VALUES)
def test_both_writers_write_what_reads_back_unchanged(value: Any) -> None:
    check_json(value, 200)  # the writers' precondition
    light, reference = jsontext.write_light(value), jsontext.write_reference(value)
    assert _same(pydantic_core.from_json(light), value)
    assert _same(pydantic_core.from_json(reference), value)
    assert _same(jsontext.parse_light(light), value)
    assert _same(jsontext.parse_light(reference), value)


def test_a_lone_surrogate_is_refused_by_both_writers() -> None:
    with pytest.raises(ValueError):
        jsontext.write_light({"a": "\ud800"})
    with pytest.raises(ValueError):
        jsontext.write_reference({"a": "\ud800"})


def test_the_largest_int_the_reader_reads_round_trips_and_a_larger_one_is_refused() -> None:
    largest = -(10**jsontext.MAX_INT_DIGITS - 1)
    for written in (jsontext.write_light([largest]), jsontext.write_reference([largest])):
        assert jsontext.parse_light(written) == pydantic_core.from_json(written) == [largest]
    codec = Codec()
    envelope = Envelope.initial("big-int", None, "k", 1, {"n": largest})
    assert codec.decode(codec.encode(envelope)).payload["n"] == largest
    # One digit more: the reader would refuse it, so the writer does (never an
    # acknowledged save that cannot be loaded).
    too_big = Envelope.initial("big-int", None, "k", 1, {"n": 10**jsontext.MAX_INT_DIGITS})
    with pytest.raises(InvalidPayload, match="4300 digits"):
        codec.encode(too_big)


def test_check_json_counts_the_values_inside_containers() -> None:
    assert check_json([1, [2, 3], {"a": {"b": None}}], 200) == 3 + 2 + 1 + 1
    assert check_json("scalar", 200) == 0


@pytest.mark.parametrize("digits", [3999, 4400, 9000])
def test_a_number_of_thousands_of_digits_reads_as_the_reference_reads_it(digits: int) -> None:
    """Found by the mutation test: Python's float reads `9...9.0` of 4,400 digits as
    infinity, the reference refuses it; the light engine must not answer first."""
    _agree(b"[" + b"9" * digits + b".0]")
    _agree(b'{"n": ' + b"9" * digits + b"}")
