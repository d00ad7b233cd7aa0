"""Planted objects that inflate: each is refused fast, before its bytes are materialised.

The real sizes of issue #10 (48 MB of `[{},...]`, 300 MB of `[0,...]`, a 1 GB string, 1 GiB
of zeros without a declared size) are built here by streaming compression, never held in
memory; peak memory and time per object are measured in `bench/hostile_bench.py`.
"""

from __future__ import annotations

import pytest
import zstandard

from stashpoint import InvalidPayload, LimitExceeded, UnsupportedFormat
from stashpoint.codec import Codec, Limits

HEADER = b'{"format":"stashpoint.envelope/1","id":"evil","run_id":null,"kind":"k",'
HEADER += b'"schema_version":1,"revision":0,"write_id":"w","lineage":[],'
HEADER += b'"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","payload":'


def frame(prefix: bytes, unit: bytes, count: int, suffix: bytes, *, declare: bool = True) -> bytes:
    """A zstd frame of prefix + unit * count + suffix, compressed as a stream."""
    size = len(prefix) + len(unit) * count + len(suffix)
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=declare)
    chunk_units = max(1, (1 << 20) // len(unit))
    pieces = compressor.compressobj(size=size if declare else -1)
    out = [pieces.compress(prefix)]
    left = count
    while left:
        n = min(left, chunk_units)
        out.append(pieces.compress(unit * n))
        left -= n
    out.append(pieces.compress(suffix))
    out.append(pieces.flush())
    return b"".join(out)


@pytest.mark.parametrize(
    ("name", "unit", "count", "prefix", "suffix"),
    [
        ("48MB of [{},{},...]", b"{},", 16_000_000, HEADER + b"[", b"{}]}"),
        ("300MB of [0,0,...]", b"0,", 150_000_000, HEADER + b"[", b"0]}"),
        ("a 1GB string", b"a", 1_000_000_000, HEADER + b'"', b'"}'),
    ],
)
def test_declared_bombs_are_refused_before_decompressing(
    name: str, unit: bytes, count: int, prefix: bytes, suffix: bytes
) -> None:
    data = frame(prefix, unit, count, suffix)
    assert len(data) < 100_000, name  # tiny stored objects
    with pytest.raises(LimitExceeded, match=r"inflat|over the limit"):
        Codec().decode(data, name=name)


def test_undeclared_gigabyte_of_zeros_stops_at_the_ratio() -> None:
    data = frame(b"", b"\0" * 1024, 1 << 20, b"", declare=False)
    assert zstandard.get_frame_parameters(data).content_size == zstandard.CONTENTSIZE_UNKNOWN
    with pytest.raises(InvalidPayload):  # not JSON, and would inflate past the ratio anyway
        Codec().decode(data, name="zeros")


def test_undeclared_json_bomb_stops_at_the_ratio_not_at_the_size_limit() -> None:
    data = frame(HEADER + b"[", b"0,", 100_000_000, b"0]}", declare=False)
    with pytest.raises(LimitExceeded, match="inflates"):
        Codec().decode(data, name="undeclared")


def test_object_not_starting_with_the_format_is_refused_from_its_first_bytes() -> None:
    data = frame(b'{"payload":[', b"1,", 50_000_000, b"1]}")
    limits = Limits(max_inflation_ratio=10**9, max_decompressed_bytes=256 << 20)
    with pytest.raises(UnsupportedFormat, match="format"):
        Codec(limits).decode(data, name="no-format")


def test_a_genuine_large_transcript_still_loads() -> None:
    from stashpoint import Envelope

    text = "".join(f"line {i}: def handler(event, context): return {i} * 2\n" for i in range(4000))
    messages = [{"role": "tool", "content": text[i % 97 :] + str(i)} for i in range(60)]
    envelope = Envelope.initial("t", None, "k", 1, {"transcript": messages})
    codec = Codec()
    assert codec.decode(codec.encode(envelope)) == envelope


def test_the_limits_object_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="ratio"):
        Limits(max_inflation_ratio=0)


@pytest.fixture(params=["memory_url", "local_url", "s3_seaweed_url"])
def any_url(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    return request.getfixturevalue(request.param)


def test_an_oversize_stored_object_is_refused_from_its_size_unread(
    any_url: tuple[str, dict[str, object]],
) -> None:
    import stashpoint
    from stashpoint.stores.objects import PutObject

    url, options = any_url
    with stashpoint.open(url, **options) as writer:
        key = writer.checkpoints.steps.key("big")
        writer.driver(PutObject(key, b"{" + b" " * 50_000 + b"}", None))
    small = Limits(max_compressed_bytes=10_000)
    with (
        stashpoint.open(url, limits=small, **options) as reader,
        pytest.raises(LimitExceeded, match="50002 bytes"),
    ):
        reader.checkpoints.load("big")
