"""The codec: round trips, format stability and every kind of bad input."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from stashpoint import Envelope, InvalidPayload, LimitExceeded, UnsupportedFormat
from stashpoint.codec import FORMAT, Codec, Limits

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
ids = st.from_regex(r"[A-Za-z0-9._:-]{1,40}", fullmatch=True).filter(lambda s: s not in (".", ".."))


def sample(payload: object = None) -> Envelope:
    return Envelope.initial("ckpt-1", "run-1", "test.kind", 3, payload or {"a": [1, 2, 3]})


@given(payload=json_values, checkpoint_id=ids, revisions=st.integers(0, 40))
def test_round_trip_preserves_every_field(
    payload: object, checkpoint_id: str, revisions: int
) -> None:
    codec = Codec()
    env = Envelope.initial(checkpoint_id, None, "k", 1, payload)
    for n in range(revisions):
        env = env.next({"n": n, "payload": payload})
    assert codec.decode(codec.encode(env)) == env


def test_encoding_is_a_checksummed_zstd_frame_of_json_whose_first_key_is_format() -> None:
    data = Codec().encode(sample())
    params = zstandard.get_frame_parameters(data)
    assert params.has_checksum and params.content_size > 0
    text = zstandard.ZstdDecompressor().decompress(data).decode("utf-8")
    assert text.startswith('{"format":"stashpoint.envelope/1"')
    assert json.loads(text)["payload"] == {"a": [1, 2, 3]}


def test_uncompressed_json_object_is_accepted() -> None:
    codec = Codec()
    env = sample()
    raw = zstandard.ZstdDecompressor().decompress(codec.encode(env))
    assert codec.decode(raw) == env
    assert codec.decode(b"  \n" + raw) == env


def test_bit_flipped_frame_raises_invalid_payload_naming_object() -> None:
    data = bytearray(Codec().encode(sample({"text": "x" * 500})))
    data[len(data) // 2] ^= 0x10
    with pytest.raises(InvalidPayload) as info:
        Codec().decode(bytes(data), name="checkpoints/ckpt-1")
    assert "checkpoints/ckpt-1" in str(info.value)


def test_checksum_mismatch_raises_invalid_payload() -> None:
    data = bytearray(Codec().encode(sample()))
    data[-1] ^= 0xFF  # the last 4 bytes are the content checksum
    with pytest.raises(InvalidPayload, match="checksum"):
        Codec().decode(bytes(data))


def test_truncated_frame_raises_invalid_payload() -> None:
    data = Codec().encode(sample({"text": "y" * 1000}))
    with pytest.raises(InvalidPayload):
        Codec().decode(data[: len(data) - 10])


def test_trailing_bytes_after_frame_raise_invalid_payload() -> None:
    data = Codec().encode(sample())
    with pytest.raises(InvalidPayload, match="trailing"):
        Codec().decode(data + b"extra")


def test_zstd_bomb_declaring_huge_size_fails_fast() -> None:
    # A frame of a few bytes that claims 10 GB: rejected from its header, nothing allocated.
    with pytest.raises(LimitExceeded, match="declares"):
        Codec(Limits(max_decompressed_bytes=1 << 20)).decode(_frame_claiming(10 * 1024**3))


def test_zstd_bomb_without_declared_size_stops_at_limit() -> None:
    chunker = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    start = chunker.compress(b'{"format":"stashpoint.envelope/1","payload":"')  # looks right
    bomb = start + b"".join(chunker.compress(b"a" * (1 << 20)) for _ in range(64))
    bomb += chunker.flush()
    assert len(bomb) < 16 * 1024  # 64 MiB of zeros in a few KB
    with pytest.raises(LimitExceeded, match="inflates"):
        Codec(Limits(max_decompressed_bytes=1 << 20)).decode(bomb)


def test_oversize_stored_object_is_refused_before_decompression() -> None:
    data = Codec().encode(sample({"t": "z" * 10_000}))
    with pytest.raises(LimitExceeded):
        Codec(Limits(max_compressed_bytes=len(data) - 1)).decode(data)


def test_oversize_envelope_is_refused_on_encode() -> None:
    with pytest.raises(LimitExceeded):
        Codec(Limits(max_decompressed_bytes=1000)).encode(sample({"t": "z" * 2000}))


def test_deep_nesting_raises_limit_exceeded() -> None:
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    data = Codec().encode(sample({"deep": deep}))
    with pytest.raises(LimitExceeded, match="nesting"):
        Codec(Limits(max_depth=20)).decode(data)
    assert Codec(Limits(max_depth=50)).decode(data).payload == {"deep": deep}


def test_nesting_beyond_parser_ceiling_raises_limit_exceeded() -> None:
    doc = b'{"format": "stashpoint.envelope/1", "payload": ' + b"[" * 300 + b"]" * 300 + b"}"
    with pytest.raises(LimitExceeded):
        Codec().decode(doc)


@pytest.mark.parametrize(
    ("document", "error"),
    [
        (b'{"format": "stashpoint.envelope/2", "id": "a"}', UnsupportedFormat),
        (b'{"format": "langgraph.checkpoint/1"}', UnsupportedFormat),
        (b'{"format": "stashpoint.envelope/x"}', UnsupportedFormat),
        (b'{"id": "no-format"}', UnsupportedFormat),
        (b"[1, 2, 3]", InvalidPayload),
        (b"not json at all", InvalidPayload),
        (b"", InvalidPayload),
        (b'{"format": "stashpoint.envelope/1", "id": "a"', InvalidPayload),
    ],
)
def test_bad_documents_raise_typed_errors(document: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        Codec().decode(document, name="obj")


@pytest.mark.parametrize(
    "change",
    [
        {"revision": -1},
        {"revision": 2**63},
        {"id": "a/b"},
        {"kind": ""},
        {"write_id": ""},
        {"created_at": "yesterday"},
        {"schema_version": "one"},
        {"revision": "7"},
        {"revision": True},
        {"revision": 7.0},
        {"created_at": 1767225600},
        {"created_at": "2026-01-01T00:00:00"},
    ],
)
def test_invalid_fields_raise_invalid_payload(change: dict[str, object]) -> None:
    raw = json.loads(zstandard.ZstdDecompressor().decompress(Codec().encode(sample())))
    raw.update(change)
    with pytest.raises(InvalidPayload) as caught:
        Codec().decode(json.dumps(raw).encode(), name="checkpoints/a")
    # Said once, naming the field and the stored object (once).
    message = str(caught.value)
    assert message.count("envelope fields are invalid") == 1
    assert next(iter(change)) in message
    assert message.endswith(" [checkpoints/a]") and message.count("[checkpoints/a]") == 1


def test_not_json_serialisable_payload_raises_invalid_payload() -> None:
    with pytest.raises(InvalidPayload):
        Codec().encode(sample({"nan": float("nan")}))
    with pytest.raises(InvalidPayload):
        Codec().encode(sample({"obj": object()}))
    # The word alone is fine.
    assert Codec().decode(Codec().encode(sample({"s": "NaN Infinity"}))).payload == {
        "s": "NaN Infinity"
    }


def test_timestamps_are_utc_iso8601() -> None:
    env = sample().with_timestamps(
        datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), datetime(2030, 1, 2, 3, 4, 6, tzinfo=UTC)
    )
    text = zstandard.ZstdDecompressor().decompress(Codec().encode(env))
    assert b'"created_at":"2030-01-02T03:04:05+00:00"' in text
    assert FORMAT == "stashpoint.envelope/1"


def _frame_claiming(size: int) -> bytes:
    """A tiny zstd frame whose header declares `size` bytes of content."""
    header = bytearray(b"\x28\xb5\x2f\xfd")
    header.append(0b11100000)  # FCS 8 bytes, single segment
    header += size.to_bytes(8, "little")
    return bytes(header) + zlib.compress(b"x")[:8]


def test_one_codec_decodes_correctly_after_every_kind_of_failure() -> None:
    """The codec reuses its zstd contexts per thread: a failed decode or encode must not
    leave state behind that corrupts the next one."""
    codec = Codec(Limits(max_decompressed_bytes=1 << 20))
    good = sample({"text": "fine " * 200})
    data = codec.encode(good)
    chunker = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    bomb = b"".join(chunker.compress(b"\0" * (1 << 20)) for _ in range(4)) + chunker.flush()
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x10
    bad_inputs = [data[: len(data) - 10], bytes(flipped), data + b"extra", bomb]
    for bad in bad_inputs:
        with pytest.raises((InvalidPayload, LimitExceeded)):
            codec.decode(bad)
        assert codec.decode(data) == good
    with pytest.raises(LimitExceeded):
        codec.encode(sample({"text": "x" * (2 << 20)}))
    assert codec.encode(good) == data
    assert codec.decode(codec.encode(good)) == good


def test_document_that_compresses_past_the_inflation_guard_still_reads_back() -> None:
    # 5 MB of one character compresses ~20,000x; readers refuse frames past
    # max_inflation_ratio, so the writer stores such a document as plain JSON instead.
    codec = Codec()
    document = {"format": "stashpoint.log/1", "value": "x" * (5 * 1024 * 1024)}
    stored = list_steps_result(codec.document_encoding(document, name="big"))
    assert stored[:1] == b"{"
    decoded = list_steps_result(
        codec.document_decoding(stored, name="big", format_name="stashpoint.log", format_version=1)
    )
    assert decoded == document
    # A document that compresses within the guard stays a zstd frame.
    small = list_steps_result(codec.document_encoding({"format": "f/1", "v": "y" * 1000}, name="s"))
    assert small[:4] == b"\x28\xb5\x2f\xfd"


def list_steps_result(steps: object) -> bytes | dict[str, object]:
    from stashpoint.steps import run_sync

    return run_sync(steps, lambda request: None)  # type: ignore[arg-type]


# Issue 23 #21: a reader took 9-10x an object's decompressed size (64 MiB cost 668 MB, the
# 256 MiB default let ~2.2 GB through). Shapes that cost Python the most per byte of text.
_COSTLY = {
    "one-key objects": lambda i: {f"k{i:x}": i},
    "empty lists": lambda i: [],
    "unique short strings": lambda i: f"{i:x}",
    "floats": lambda i: i + 0.5,
    "emoji text": lambda i: "\N{GRINNING FACE}" + "a" * (i % 50),
}


@pytest.mark.parametrize("shape", sorted(_COSTLY))
def test_a_document_the_limits_accept_costs_a_reader_at_most_what_they_document(
    shape: str,
) -> None:
    import tracemalloc

    limits = Limits(max_values=200_000, max_inflation_ratio=10**6)
    codec = Codec(limits)
    values, count = _COSTLY[shape], 1
    while True:  # the largest document of this shape the limits accept
        envelope = Envelope.initial("m", None, "t.k", 1, [values(i) for i in range(count * 2)])
        try:
            codec.encode(envelope)
        except LimitExceeded:
            break
        count *= 2
    envelope = Envelope.initial("m", None, "t.k", 1, [values(i) for i in range(count)])
    data = codec.encode(envelope)
    raw = len(zstandard.decompress(data))
    tracemalloc.start()
    try:
        assert codec.decode(data) == envelope
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What `Limits.max_values` documents, plus the text itself and the stored bytes.
    assert peak <= 82 * limits.max_values + 4 * raw + raw + len(data) + (1 << 20), (peak, raw)
    with pytest.raises(LimitExceeded, match="max_values"):
        codec.encode(Envelope.initial("m", None, "t.k", 1, [values(i) for i in range(count * 2)]))
    big = Codec(Limits(max_values=400_000, max_inflation_ratio=10**6))
    with pytest.raises(LimitExceeded, match="max_values"):  # a reader refuses it the same way
        codec.decode(
            big.encode(Envelope.initial("m", None, "t.k", 1, [values(i) for i in range(count * 2)]))
        )


def test_the_default_limits_bound_a_reader_under_a_gigabyte() -> None:
    limits = Limits()
    parsed = 82 * limits.max_values + 4 * limits.max_decompressed_bytes
    reading = parsed + limits.max_decompressed_bytes + limits.max_compressed_bytes
    assert reading < 1000 * 1000 * 1000 * 0.9  # room for the interpreter in a 1 GB Lambda
